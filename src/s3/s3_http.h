// The HTTP layer of s3:// tiers: signed requests to an S3 endpoint through libcurl, run in parallel on
// a curl multi handle. SigV4 signing is libcurl's (CURLOPT_AWS_SIGV4); every request carries
// x-amz-content-sha256: UNSIGNED-PAYLOAD, which S3 and radosgw require with curl's signing (the payload
// is protected by the chunk checksums and, on https, by TLS). Headers are not removed ("Expect:"): curl
// 7.88 would sign the removed header and the endpoint answers 403. GET bodies land in the caller's buffer.
// KVTIER_S3_DEBUG=1 in the environment turns on curl's verbose trace (stderr).
//
// S3Http is thread-safe: each Run takes a multi handle from a pool (its connection cache stays warm for
// the next call) or makes one. HTTP and curl failures are mapped to Status in one place (S3Status).
#pragma once

#include <curl/curl.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/uri_encode.h"
#include "core/thread_annotations.h"
#include "kvtier/status.h"
#include "kvtier/tier.h"

namespace kvtier::s3 {

struct S3Credentials {
  std::string access_key;
  std::string secret_key;
  std::string session_token;  // optional (x-amz-security-token)
};

struct S3Endpoint {
  std::string base;    // "http://127.0.0.1:8000" (no trailing '/')
  std::string region = "us-east-1";
  S3Credentials credentials;
  std::chrono::milliseconds timeout{30000};
  std::chrono::milliseconds connect_timeout{5000};
};

// One request. For a GET the body goes into `dst` (at most dst.size() bytes; `bytes` is the object's
// full size from Content-Length, and a larger object stops the transfer); for a PUT the body is `body`;
// `text` collects small bodies (listings, errors).
struct S3Request {
  std::string method = "GET";  // GET, PUT, HEAD, DELETE
  std::string path;            // "/bucket/key", already percent-encoded
  std::string query;           // without '?', e.g. "list-type=2&prefix=p"
  std::span<std::byte> dst;
  GatherList body;
  // Results.
  long http = 0;
  CURLcode curl = CURLE_OK;
  uint64_t bytes = 0;      // GET: the object's size; PUT: bytes sent
  uint64_t received = 0;   // GET: bytes written into dst
  bool overflow = false;   // GET: the object is larger than dst
  std::string text;
};

class S3Http {
 public:
  explicit S3Http(S3Endpoint endpoint);
  ~S3Http();
  S3Http(const S3Http&) = delete;
  S3Http& operator=(const S3Http&) = delete;

  // Runs every request in parallel and waits for all.
  void Run(std::span<S3Request*> requests);
  const S3Endpoint& endpoint() const { return endpoint_; }

 private:
  CURLM* TakeMulti();
  void GiveBack(CURLM* m);

  const S3Endpoint endpoint_;
  std::string sigv4_;
  std::string userpwd_;
  internal::Mutex mu_;
  std::vector<CURLM*> idle_ GUARDED_BY(mu_);
};

// The Status of a finished request: OK for 2xx, NotFound for 404, retryable IOError for connection
// failures, timeouts, 429 and 5xx, NoSpace for QuotaExceeded, InvalidArgument naming the access key for
// 403 on credentials (InvalidAccessKeyId, SignatureDoesNotMatch), IOError otherwise.
Status S3Status(const S3Request& r, const std::string& what, const std::string& access_key);

using internal::UriEncode;  // core/uri_encode.h

}  // namespace kvtier::s3
