// The AWS shared files (~/.aws/credentials and ~/.aws/config), read the way the SDKs read them:
// AWS_SHARED_CREDENTIALS_FILE / AWS_CONFIG_FILE override the paths, AWS_PROFILE (or the
// legacy AWS_DEFAULT_PROFILE) picks the profile, "default" otherwise. In the credentials file
// a section is "[name]"; in the config file it is "[profile name]" (or "[default]"). A key in
// the credentials file wins over the same key in the config file.
#ifndef DLOCK_DYNAMODB_AWS_PROFILE_H_
#define DLOCK_DYNAMODB_AWS_PROFILE_H_

#include <map>
#include <string>

#include "core/status.h"

namespace dlock::dynamodb {

// Its values (the keys among them) are wiped when it is freed.
struct AwsProfile {
  AwsProfile() = default;
  AwsProfile(const AwsProfile&) = default;
  AwsProfile& operator=(const AwsProfile&) = default;
  ~AwsProfile();

  std::string name;                          // the profile's name
  bool found = false;                        // a section of that name exists in either file
  bool explicitly_chosen = false;            // named by AWS_PROFILE / AWS_DEFAULT_PROFILE
  std::map<std::string, std::string> values;  // lowercase keys: aws_access_key_id, region, ...
  std::string credentials_file, config_file;  // the paths read (for messages)
  std::string Get(const std::string& key) const {
    auto it = values.find(key);
    return it == values.end() ? std::string() : it->second;
  }
};

// Reads the profile from both files. Missing files are not an error; unreadable ones are.
Status LoadAwsProfile(AwsProfile* out);

// Parses INI text into section -> key -> value (keys lowercased; values trimmed; a caller wipes
// the values when they hold keys). Lines
// starting with '#' or ';' are comments; indented lines below "key =" (sub-properties, such
// as a "services" block) are skipped.
std::map<std::string, std::map<std::string, std::string>> ParseIni(const std::string& text);

// The value of an environment variable, "" when unset.
std::string Env(const char* name);

// Whether an AWS boolean setting (environment or profile) says true, as the AWS SDKs read it.
bool IsTrue(const std::string& value);

}  // namespace dlock::dynamodb

#endif  // DLOCK_DYNAMODB_AWS_PROFILE_H_
