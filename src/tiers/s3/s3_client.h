// S3Client: the ObjectClient of s3:// tiers, over any S3 endpoint (AWS S3, Ceph radosgw, MinIO) through
// libcurl (s3_http.h).
//
//   s3://BUCKET[/PREFIX]?endpoint=http://127.0.0.1:8000&region=us-east-1&credentials_file=F&profile=P
//       &create_bucket=1&timeout_ms=30000&connect_timeout_ms=5000
//
// One chunk is one object "PREFIX/<name>" (object_names.h) in BUCKET, addressed path-style
// (endpoint/BUCKET/key). A batch of gets or puts runs in parallel on one curl multi handle (ObjectTier
// bounds its bytes); a GET's body lands straight in the caller's buffers (ScatterReads: the tier's header buffer, then
// the caller's pieces) and is verified as soon as it is in. Objects removed behind kvtier's back
// (a bucket lifecycle rule, another host) are misses like any other 404.
// Credentials, never from the URL: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (/ AWS_SESSION_TOKEN) when
// set, else the [profile] (profile=, AWS_PROFILE, "default") of credentials_file=, of
// AWS_SHARED_CREDENTIALS_FILE, or of ~/.aws/credentials. Open checks the bucket with one HEAD: wrong
// credentials are one InvalidArgument naming the access key; a missing bucket is InvalidArgument unless
// create_bucket=1 (and not read-only), which creates it. Thread-safe.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/tier.h"
#include "tiers/object/object_client.h"
#include "tiers/s3/s3_http.h"

namespace kvtier::s3 {

struct S3Options {
  std::string bucket;
  std::string prefix;  // "" or ending in '/'
  S3Endpoint endpoint;
  bool create_bucket = false;
  bool read_only = false;
};

inline constexpr std::string_view kS3UrlOptions[] = {"endpoint", "region", "credentials_file", "profile",
                                                     "create_bucket"};

// Parses the URL and finds the credentials; InvalidArgument when either is missing or a secret is in the URL.
Result<S3Options> ParseS3Options(const TierUrl& url);
Result<std::unique_ptr<object::ObjectClient>> OpenS3Client(const S3Options& options);
Result<std::unique_ptr<object::ObjectClient>> OpenS3ObjectClient(const TierUrl& url,
                                                                 const object::ObjectClientOptions& options);

}  // namespace kvtier::s3
