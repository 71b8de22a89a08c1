// The options and credentials of s3:// URLs (s3_client.h).
#include <cstdlib>
#include <sstream>

#include "tiers/s3/s3_client.h"

#include "core/input_file.h"

namespace kvtier::s3 {
namespace {

std::string Trim(std::string s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  const auto e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

// The [profile] section of an AWS shared-credentials file.
Result<S3Credentials> ReadCredentialsFile(const std::string& path, const std::string& profile) {
  // The one opener of secrets: absolute, no link, regular, bounded, owner-only (core/input_file.h).
  auto text = internal::ReadSecretFile(path, "s3: credentials file");
  if (!text.ok()) return Status::InvalidArgument(text.status().message());
  std::istringstream in(*text);
  S3Credentials c;
  std::string line, section;
  while (std::getline(in, line)) {
    line = Trim(line);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[' && line.back() == ']') {
      section = Trim(line.substr(1, line.size() - 2));
      continue;
    }
    const auto eq = line.find('=');
    if (section != profile || eq == std::string::npos) continue;
    const std::string k = Trim(line.substr(0, eq)), v = Trim(line.substr(eq + 1));
    if (k == "aws_access_key_id") c.access_key = v;
    if (k == "aws_secret_access_key") c.secret_key = v;
    if (k == "aws_session_token") c.session_token = v;
  }
  if (c.access_key.empty() || c.secret_key.empty()) {
    return Status::InvalidArgument("s3: no aws_access_key_id/aws_secret_access_key for profile [" + profile +
                                   "] in " + path);
  }
  return c;
}

Result<S3Credentials> FindCredentials(const TierUrl& url) {
  S3Credentials env{Env("AWS_ACCESS_KEY_ID"), Env("AWS_SECRET_ACCESS_KEY"), Env("AWS_SESSION_TOKEN")};
  auto file_it = url.params.find("credentials_file");
  // An explicit credentials_file= wins over the environment; else the environment, else the files.
  if (file_it == url.params.end() && !env.access_key.empty() && !env.secret_key.empty()) return env;
  std::string profile = Env("AWS_PROFILE");
  if (auto it = url.params.find("profile"); it != url.params.end()) profile = it->second;
  if (profile.empty()) profile = "default";
  std::string path = file_it != url.params.end() ? file_it->second : Env("AWS_SHARED_CREDENTIALS_FILE");
  if (path.empty() && !Env("HOME").empty()) path = Env("HOME") + "/.aws/credentials";
  if (path.empty()) return Status::InvalidArgument("s3: no credentials (AWS_ACCESS_KEY_ID or credentials_file=)");
  return ReadCredentialsFile(path, profile);
}

}  // namespace

Result<S3Options> ParseS3Options(const TierUrl& url) {
  for (const char* secret : {"access_key", "secret_key", "secret", "password", "key"}) {
    if (url.params.contains(secret)) {
      return Status::InvalidArgument("s3:// never takes credentials in the URL: use the environment or credentials_file=");
    }
  }
  S3Options o;
  const std::string& path = url.path;
  const size_t slash = path.find('/');
  o.bucket = path.substr(0, slash);
  if (slash != std::string::npos) o.prefix = path.substr(slash + 1);
  if (!o.prefix.empty() && o.prefix.back() != '/') o.prefix += '/';
  if (o.bucket.empty()) return Status::InvalidArgument("s3:// needs a bucket: s3://BUCKET[/PREFIX]?endpoint=...");
  auto ep = url.params.find("endpoint");
  if (ep == url.params.end()) return Status::InvalidArgument("s3:// needs endpoint= (e.g. https://s3.us-east-1.amazonaws.com)");
  o.endpoint.base = ep->second;
  while (!o.endpoint.base.empty() && o.endpoint.base.back() == '/') o.endpoint.base.pop_back();
  if (!o.endpoint.base.starts_with("http://") && !o.endpoint.base.starts_with("https://")) {
    return Status::InvalidArgument("s3: endpoint= must start with http:// or https://");
  }
  if (auto it = url.params.find("region"); it != url.params.end()) o.endpoint.region = it->second;
  KVTIER_ASSIGN_OR_RETURN(o.create_bucket, url.GetBool("create_bucket", false));
  KVTIER_ASSIGN_OR_RETURN(o.endpoint.credentials, FindCredentials(url));
  return o;
}

}  // namespace kvtier::s3
