// The HTTP layer of s3:// tiers: signed requests to an S3 endpoint through libcurl, run in parallel on
// a curl multi handle. SigV4 signing is libcurl's (CURLOPT_AWS_SIGV4); every request carries
// x-amz-content-sha256: UNSIGNED-PAYLOAD, which S3 and radosgw require with curl's signing (the payload
// is protected by the chunk checksums and, on https, by TLS). Headers are not removed ("Expect:"): curl
// 7.88 would sign the removed header and the endpoint answers 403. GET bodies land in the caller's buffers.
// KVTIER_S3_DEBUG=1 in the environment turns on curl's verbose trace (stderr).
//
// S3Http is thread-safe: each Run takes a multi handle from a pool (its connection cache stays warm for
// the next call) or makes one. HTTP and curl failures are mapped to Status in one place (S3Status).
#pragma once

#include <curl/curl.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/uri_encode.h"
#include "core/thread_annotations.h"
#include "kvtier/status.h"
#include "kvtier/tier.h"
#include "tiers/object/object_client.h"

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

// One request. For a GET of an object (`read` set) the 2xx body lands across read->dst, then
// read->rest (object/object_client.h's ObjectLander, no staging); `bytes` is the object's full size from
// Content-Length, and an object larger than the op's capacity is refused at its first body bytes
// (`overflow`, nothing copied) or, without a Content-Length, stops the transfer when it passes it. For a
// PUT the body is `body`; `text` collects other bodies (listings, errors), bounded. `done`, when set,
// is called on Run's thread as soon as this transfer has ended (its results set), while the others go on.
struct S3Request {
  std::string method = "GET";  // GET, PUT, HEAD, DELETE
  std::string path;            // "/bucket/key", already percent-encoded
  std::string query;           // without '?', e.g. "list-type=2&prefix=p"
  object::ObjectRead* read = nullptr;
  GatherList body;
  std::function<void(S3Request&)> done;
  // Results.
  long http = 0;
  CURLcode curl = CURLE_OK;
  uint64_t bytes = 0;      // GET: the object's size; PUT: bytes sent
  uint64_t received = 0;   // GET: bytes landed in `read`'s buffers
  bool overflow = false;   // GET: the object is larger than `read`'s buffers
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
  internal::Mutex mu_;
  std::vector<CURLM*> idle_ GUARDED_BY(mu_);
};

// curl_global_init, once per process (S3Http's constructor calls it).
void InitCurlOnce();

// Sets up `e` to be signed for `endpoint` (SigV4 with the credentials, the payload-hash header, the
// session token), with the endpoint's timeouts. Returns the header list `e` now uses: the caller frees
// it (curl_slist_free_all) after the transfer. Shared by S3Http and the bench's raw-libcurl reference.
curl_slist* SetUpSigning(CURL* e, const S3Endpoint& endpoint);

// The Status of a finished request: OK for 2xx, NotFound for 404, retryable IOError for connection
// failures, timeouts, 429 and 5xx, NoSpace for QuotaExceeded, InvalidArgument naming the access key for
// 403 on credentials (InvalidAccessKeyId, SignatureDoesNotMatch), IOError otherwise.
Status S3Status(const S3Request& r, const std::string& what, const std::string& access_key);

using internal::UriEncode;  // core/uri_encode.h

}  // namespace kvtier::s3
