#include "dynamodb/aws_profile.h"

#include "core/text.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace dlock::dynamodb {
namespace {

std::string HomeFile(const char* env_name, const char* relative) {
  std::string overridden = Env(env_name);
  if (!overridden.empty()) {
    if (overridden[0] == '~' && !Env("HOME").empty()) return Env("HOME") + overridden.substr(1);
    return overridden;
  }
  std::string home = Env("HOME");
  return home.empty() ? std::string() : home + "/" + relative;
}

// Reads path into *text; a missing file gives "" and Ok.
Status ReadOptional(const std::string& path, std::string* text) {
  text->clear();
  if (path.empty()) return Status::Ok();
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (errno == ENOENT || errno == ENOTDIR) return Status::Ok();
    return Status::AuthError("cannot read AWS shared file " + path + ": " + std::strerror(errno));
  }
  std::ostringstream buf;
  buf << in.rdbuf();
  *text = buf.str();
  return Status::Ok();
}

}  // namespace

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

bool IsTrue(const std::string& v) { return v == "true" || v == "TRUE" || v == "True" || v == "1"; }

std::map<std::string, std::map<std::string, std::string>> ParseIni(const std::string& text) {
  std::map<std::string, std::map<std::string, std::string>> sections;
  std::istringstream in(text);
  std::string line, section;
  bool in_section = false;
  while (std::getline(in, line)) {
    bool indented = !line.empty() && (line[0] == ' ' || line[0] == '\t');
    std::string t = Trim(line);
    if (t.empty() || t[0] == '#' || t[0] == ';') continue;
    if (t.front() == '[' && t.back() == ']') {
      section = Trim(t.substr(1, t.size() - 2));
      in_section = true;
      sections[section];
      continue;
    }
    if (!in_section || indented) continue;  // sub-properties are not needed here
    size_t eq = t.find('=');
    if (eq == std::string::npos) continue;
    std::string key = Lower(Trim(t.substr(0, eq)));
    std::string value = Trim(t.substr(eq + 1));
    if (!key.empty()) sections[section][key] = value;
  }
  return sections;
}

Status LoadAwsProfile(AwsProfile* out) {
  *out = AwsProfile();
  out->name = Env("AWS_PROFILE");
  if (out->name.empty()) out->name = Env("AWS_DEFAULT_PROFILE");
  out->explicitly_chosen = !out->name.empty();
  if (out->name.empty()) out->name = "default";

  std::string config_text, credentials_text;
  out->config_file = HomeFile("AWS_CONFIG_FILE", ".aws/config");
  out->credentials_file = HomeFile("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials");
  Status s = ReadOptional(out->config_file, &config_text);
  if (!s.ok()) return s;
  s = ReadOptional(out->credentials_file, &credentials_text);
  if (!s.ok()) return s;

  auto config = ParseIni(config_text);
  for (const std::string& section :
       {std::string("profile ") + out->name, out->name == "default" ? out->name : std::string()}) {
    if (section.empty()) continue;
    auto it = config.find(section);
    if (it == config.end()) continue;
    out->found = true;
    for (const auto& [k, v] : it->second) out->values.emplace(k, v);
  }
  auto credentials = ParseIni(credentials_text);
  if (auto it = credentials.find(out->name); it != credentials.end()) {
    out->found = true;
    for (const auto& [k, v] : it->second) out->values[k] = v;  // the credentials file wins
  }
  return Status::Ok();
}

}  // namespace dlock::dynamodb
