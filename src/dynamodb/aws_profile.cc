#include "dynamodb/aws_profile.h"

#include "core/secret.h"
#include "core/text.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string_view>

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

// Reads path into *text; a missing file gives "" and Ok. Straight into text, with no stream
// buffer that would keep an unwiped copy of the keys in it.
Status ReadOptional(const std::string& path, Secret* text) {
  *text = Secret();
  if (path.empty()) return Status::Ok();
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR) return Status::Ok();
    return Status::AuthError("cannot read AWS shared file " + path + ": " + std::strerror(errno));
  }
  std::string data;
  char chunk[4096];
  int error = 0;
  for (;;) {
    const ssize_t n = read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      error = n < 0 ? errno : 0;
      break;
    }
    if (data.size() + static_cast<size_t>(n) > data.capacity()) {
      // Grow by hand, so that the buffer given up is wiped first.
      std::string bigger;
      bigger.reserve(2 * (data.size() + static_cast<size_t>(n)));
      bigger.append(data);
      Cleanse(&data);
      data.swap(bigger);
    }
    data.append(chunk, static_cast<size_t>(n));
  }
  OPENSSL_cleanse(chunk, sizeof chunk);
  close(fd);
  *text = Secret(std::move(data));
  if (error != 0) {
    return Status::AuthError("cannot read AWS shared file " + path + ": " + std::strerror(error));
  }
  return Status::Ok();
}

// Wipes every value of parsed INI text (keys and secrets alike) before it is freed.
void CleanseIni(std::map<std::string, std::map<std::string, std::string>>* sections) {
  for (auto& [name, values] : *sections) {
    for (auto& [key, value] : values) Cleanse(&value);
  }
}

}  // namespace

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

bool IsTrue(const std::string& v) { return v == "true" || v == "TRUE" || v == "True" || v == "1"; }

AwsProfile::~AwsProfile() {
  for (auto& [key, value] : values) Cleanse(&value);
}

std::map<std::string, std::map<std::string, std::string>> ParseIni(const std::string& text) {
  std::map<std::string, std::map<std::string, std::string>> sections;
  std::string section;
  bool in_section = false;
  std::string_view rest(text);
  while (!rest.empty()) {  // lines viewed in place: no copy of the text to wipe
    const size_t newline = rest.find('\n');
    const std::string_view line = rest.substr(0, newline);
    rest = newline == std::string_view::npos ? std::string_view() : rest.substr(newline + 1);
    bool indented = !line.empty() && (line[0] == ' ' || line[0] == '\t');
    const Secret t = Trim(line);
    if (t.empty() || t[0] == '#' || t[0] == ';') continue;
    if (t.front() == '[' && t.back() == ']') {
      section = Trim(std::string_view(t).substr(1, t.size() - 2));
      in_section = true;
      sections[section];
      continue;
    }
    if (!in_section || indented) continue;  // sub-properties are not needed here
    size_t eq = t.find('=');
    if (eq == std::string::npos) continue;
    std::string key = Lower(Trim(std::string_view(t).substr(0, eq)));
    if (key.empty()) continue;
    Secret value = Trim(std::string_view(t).substr(eq + 1));
    std::string& slot = sections[section][key];
    Cleanse(&slot);
    slot = value;
  }
  return sections;
}

Status LoadAwsProfile(AwsProfile* out) {
  for (auto& [key, value] : out->values) Cleanse(&value);  // before the assignment reuses them
  *out = AwsProfile();
  out->name = Env("AWS_PROFILE");
  if (out->name.empty()) out->name = Env("AWS_DEFAULT_PROFILE");
  out->explicitly_chosen = !out->name.empty();
  if (out->name.empty()) out->name = "default";

  Secret config_text, credentials_text;
  out->config_file = HomeFile("AWS_CONFIG_FILE", ".aws/config");
  out->credentials_file = HomeFile("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials");
  Status s = ReadOptional(out->config_file, &config_text);
  if (!s.ok()) return s;
  s = ReadOptional(out->credentials_file, &credentials_text);
  if (!s.ok()) return s;

  // Wiped at every return: the values hold the keys.
  struct Wiped {
    std::map<std::string, std::map<std::string, std::string>> ini;
    ~Wiped() { CleanseIni(&ini); }
  } config{ParseIni(config_text)}, credentials{ParseIni(credentials_text)};
  for (const std::string& section :
       {std::string("profile ") + out->name, out->name == "default" ? out->name : std::string()}) {
    if (section.empty()) continue;
    auto it = config.ini.find(section);
    if (it == config.ini.end()) continue;
    out->found = true;
    for (const auto& [k, v] : it->second) out->values.emplace(k, v);
  }
  if (auto it = credentials.ini.find(out->name); it != credentials.ini.end()) {
    out->found = true;
    for (const auto& [k, v] : it->second) {
      std::string& slot = out->values[k];  // the credentials file wins
      Cleanse(&slot);
      slot = v;
    }
  }
  return Status::Ok();
}

}  // namespace dlock::dynamodb
