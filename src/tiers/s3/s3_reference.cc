#include "tiers/s3/s3_reference.h"

#include <curl/curl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tiers/s3/s3_client.h"
#include "tiers/s3/s3_http.h"

namespace kvtier::s3 {
namespace {

// Where one GET's body goes.
struct Sink {
  std::byte* at = nullptr;
  size_t room = 0;
  size_t got = 0;
};

size_t ToSink(char* data, size_t size, size_t n, void* arg) {
  auto* s = static_cast<Sink*>(arg);
  const size_t len = size * n;
  if (s->got + len > s->room) return 0;  // larger than expected: stop, counted as an error
  std::memcpy(s->at + s->got, data, len);
  s->got += len;
  return len;
}

// The reference's easy handles and buffers: one per object of a window.
class CurlWindow {
 public:
  CurlWindow(const S3Endpoint& endpoint, uint64_t window, uint64_t object_bytes)
      : multi_(curl_multi_init()),
        buf_(std::make_unique_for_overwrite<std::byte[]>(window * object_bytes)),
        sinks_(window),
        easies_(window),
        headers_(window) {
    curl_multi_setopt(multi_, CURLMOPT_MAX_HOST_CONNECTIONS, 0L);
    for (uint64_t k = 0; k < window; ++k) {
      easies_[k] = curl_easy_init();
      headers_[k] = SetUpSigning(easies_[k], endpoint);
      sinks_[k] = Sink{buf_.get() + k * object_bytes, object_bytes, 0};
      curl_easy_setopt(easies_[k], CURLOPT_WRITEFUNCTION, ToSink);
      curl_easy_setopt(easies_[k], CURLOPT_WRITEDATA, &sinks_[k]);
    }
  }
  ~CurlWindow() {
    for (size_t k = 0; k < easies_.size(); ++k) {
      curl_easy_cleanup(easies_[k]);
      curl_slist_free_all(headers_[k]);
    }
    curl_multi_cleanup(multi_);
  }
  CurlWindow(const CurlWindow&) = delete;
  CurlWindow& operator=(const CurlWindow&) = delete;

  // GETs urls[0..n) together; whether each came back 200 and whole is for Body(k) and ok[k].
  void Get(const std::vector<std::string>& urls, uint64_t n, std::vector<uint8_t>* ok) {
    for (uint64_t k = 0; k < n; ++k) {
      sinks_[k].got = 0;
      curl_easy_setopt(easies_[k], CURLOPT_URL, urls[k].c_str());
      curl_multi_add_handle(multi_, easies_[k]);
    }
    int running = 0;
    do {
      curl_multi_perform(multi_, &running);
      if (running > 0) curl_multi_poll(multi_, nullptr, 0, 1000, nullptr);
    } while (running > 0);
    ok->assign(n, 0);
    int left = 0;
    while (CURLMsg* msg = curl_multi_info_read(multi_, &left)) {
      if (msg->msg != CURLMSG_DONE) continue;
      long http = 0;
      curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &http);
      for (uint64_t k = 0; k < n; ++k) {
        if (easies_[k] == msg->easy_handle) (*ok)[k] = msg->data.result == CURLE_OK && http == 200;
      }
    }
    for (uint64_t k = 0; k < n; ++k) curl_multi_remove_handle(multi_, easies_[k]);
  }
  std::span<const std::byte> Body(uint64_t k) const { return {sinks_[k].at, sinks_[k].got}; }

 private:
  CURLM* multi_;
  std::unique_ptr<std::byte[]> buf_;
  std::vector<Sink> sinks_;
  std::vector<CURL*> easies_;
  std::vector<curl_slist*> headers_;
};

}  // namespace

Result<object::RawReadResult> PlainCurlGetReference(const TierUrl& url, uint64_t object_bytes, uint64_t count,
                                                    uint64_t window) {
  KVTIER_ASSIGN_OR_RETURN(S3Options o, ParseS3Options(url));
  S3Http http(o.endpoint);
  std::vector<std::string> paths(count);
  for (uint64_t i = 0; i < count; ++i) {
    paths[i] = "/" + UriEncode(o.bucket, false) + "/" +
               UriEncode(o.prefix + "kvtier-bench-s3-ref:" + std::to_string(::getpid()) + ":" + std::to_string(i), true);
  }
  std::vector<std::byte> bytes(object_bytes);
  Status put;
  uint64_t written = 0;
  for (; written < count && put.ok(); ++written) {
    object::FillReferenceObject(bytes, written);
    const std::span<const std::byte> piece(bytes);
    S3Request r;
    r.method = "PUT";
    r.path = paths[written];
    r.body = GatherList(&piece, 1);
    S3Request* p = &r;
    http.Run(std::span(&p, 1));
    put = S3Status(r, "PUT " + r.path, o.endpoint.credentials.access_key);
  }
  object::RawReadResult result;
  window = std::max<uint64_t>(1, std::min(window, count));
  if (put.ok()) {
    CurlWindow gets(o.endpoint, window, object_bytes);
    object::FillReferenceObject(bytes, 0);  // the pattern every object is checked against
    std::vector<std::string> urls(window);
    std::vector<uint8_t> ok;
    std::chrono::duration<double> busy{0};
    for (uint64_t first = 0; first < count; first += window) {
      const uint64_t n = std::min(window, count - first);
      for (uint64_t k = 0; k < n; ++k) urls[k] = o.endpoint.base + paths[first + k];
      const auto t0 = std::chrono::steady_clock::now();
      gets.Get(urls, n, &ok);
      busy += std::chrono::steady_clock::now() - t0;
      for (uint64_t k = 0; k < n; ++k) {
        const bool good = ok[k] && object::ReferenceObjectMatches(gets.Body(k), bytes, first + k);
        result.objects += good ? 1 : 0;
        result.bytes += good ? object_bytes : 0;
        result.errors += good ? 0 : 1;
      }
    }
    result.seconds = busy.count();
  }
  for (uint64_t i = 0; i < written; ++i) {
    S3Request r;
    r.method = "DELETE";
    r.path = paths[i];
    S3Request* p = &r;
    http.Run(std::span(&p, 1));
  }
  KVTIER_RETURN_IF_ERROR(put);
  return result;
}

}  // namespace kvtier::s3
