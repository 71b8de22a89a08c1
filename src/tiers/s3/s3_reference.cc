#include "tiers/s3/s3_reference.h"

#include <curl/curl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tiers/s3/s3_client.h"
#include "tiers/s3/s3_http.h"

namespace kvtier::s3 {
namespace {

// One multi handle and `count` easy handles signed for the endpoint (SetUpSigning, whose header lists
// live as long as their handles), freed together: what the reference's GETs and PUTs both run on.
class CurlHandles {
 public:
  CurlHandles(const S3Endpoint& endpoint, uint64_t count)
      : multi_(curl_multi_init()), easies_(count), headers_(count) {
    curl_multi_setopt(multi_, CURLMOPT_MAX_HOST_CONNECTIONS, 0L);
    for (uint64_t k = 0; k < count; ++k) {
      easies_[k] = curl_easy_init();
      headers_[k] = SetUpSigning(easies_[k], endpoint);
    }
  }
  ~CurlHandles() {
    for (size_t k = 0; k < easies_.size(); ++k) {
      curl_easy_cleanup(easies_[k]);
      curl_slist_free_all(headers_[k]);
    }
    curl_multi_cleanup(multi_);
  }
  CurlHandles(const CurlHandles&) = delete;
  CurlHandles& operator=(const CurlHandles&) = delete;

  CURLM* multi() const { return multi_; }
  CURL* easy(uint64_t k) const { return easies_[k]; }
  uint64_t size() const { return easies_.size(); }

 private:
  CURLM* multi_;
  std::vector<CURL*> easies_;
  std::vector<curl_slist*> headers_;
};

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
      : buf_(std::make_unique_for_overwrite<std::byte[]>(window * object_bytes)),
        sinks_(window),
        curl_(endpoint, window) {
    for (uint64_t k = 0; k < window; ++k) {
      sinks_[k] = Sink{buf_.get() + k * object_bytes, object_bytes, 0};
      curl_easy_setopt(curl_.easy(k), CURLOPT_WRITEFUNCTION, ToSink);
      curl_easy_setopt(curl_.easy(k), CURLOPT_WRITEDATA, &sinks_[k]);
    }
  }

  // GETs urls[0..n) together; whether each came back 200 and whole is for Body(k) and ok[k].
  void Get(const std::vector<std::string>& urls, uint64_t n, std::vector<uint8_t>* ok) {
    for (uint64_t k = 0; k < n; ++k) {
      sinks_[k].got = 0;
      curl_easy_setopt(curl_.easy(k), CURLOPT_URL, urls[k].c_str());
      curl_multi_add_handle(curl_.multi(), curl_.easy(k));
    }
    int running = 0;
    do {
      curl_multi_perform(curl_.multi(), &running);
      if (running > 0) curl_multi_poll(curl_.multi(), nullptr, 0, 1000, nullptr);
    } while (running > 0);
    ok->assign(n, 0);
    int left = 0;
    while (CURLMsg* msg = curl_multi_info_read(curl_.multi(), &left)) {
      if (msg->msg != CURLMSG_DONE) continue;
      long http = 0;
      curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &http);
      for (uint64_t k = 0; k < n; ++k) {
        if (curl_.easy(k) == msg->easy_handle) (*ok)[k] = msg->data.result == CURLE_OK && http == 200;
      }
    }
    for (uint64_t k = 0; k < n; ++k) curl_multi_remove_handle(curl_.multi(), curl_.easy(k));
  }
  std::span<const std::byte> Body(uint64_t k) const { return {sinks_[k].at, sinks_[k].got}; }

 private:
  std::unique_ptr<std::byte[]> buf_;
  std::vector<Sink> sinks_;
  CurlHandles curl_;  // last: its handles, which point into sinks_, are freed first
};

// One PUT's body (a buffer of the reference's own, sent by the read callback) and the start of its
// reply's body (an error's code, for S3Status).
struct PutSource {
  const std::byte* at = nullptr;
  size_t size = 0;
  size_t sent = 0;
  std::string reply;
};

size_t FromPutSource(char* out, size_t size, size_t n, void* arg) {
  auto* s = static_cast<PutSource*>(arg);
  const size_t len = std::min(size * n, s->size - s->sent);
  std::memcpy(out, s->at + s->sent, len);
  s->sent += len;
  return len;
}

size_t ToPutReply(char* data, size_t size, size_t n, void* arg) {
  auto* s = static_cast<PutSource*>(arg);
  const size_t len = size * n;
  s->reply.append(data, std::min(len, (size_t{4} << 10) - std::min(s->reply.size(), size_t{4} << 10)));
  return len;
}

// The reference's timed PUTs: one easy handle per object in flight (reused, so its connection stays
// open) on one multi handle, each with a buffer of reference bytes of its own whose tag is set per object.
class CurlPutWindow {
 public:
  CurlPutWindow(const S3Endpoint& endpoint, uint64_t window, uint64_t object_bytes)
      : bytes_(object_bytes),
        buf_(std::make_unique_for_overwrite<std::byte[]>(window * object_bytes)),
        sources_(window),
        object_of_(window),
        curl_(endpoint, window) {
    for (uint64_t k = 0; k < window; ++k) {
      object::FillReferenceObject(std::span(buf_.get() + k * object_bytes, object_bytes), 0);
      sources_[k].at = buf_.get() + k * object_bytes;
      sources_[k].size = object_bytes;
      CURL* e = curl_.easy(k);
      curl_easy_setopt(e, CURLOPT_UPLOAD, 1L);
      curl_easy_setopt(e, CURLOPT_READFUNCTION, FromPutSource);
      curl_easy_setopt(e, CURLOPT_READDATA, &sources_[k]);
      curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(object_bytes));
      curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, ToPutReply);
      curl_easy_setopt(e, CURLOPT_WRITEDATA, &sources_[k]);
      curl_easy_setopt(e, CURLOPT_PRIVATE, reinterpret_cast<void*>(static_cast<uintptr_t>(k)));
    }
  }

  // PUTs object i to urls[i] for i in [0, urls.size()), a new PUT on a handle as soon as its last one
  // ended, until one fails; *issued: how many were started. The first failure's Status (S3Status).
  Status Run(const std::vector<std::string>& urls, const std::string& access_key, object::RawReadResult* w,
             uint64_t* issued) {
    uint64_t active = 0;
    Status first;
    const auto t0 = std::chrono::steady_clock::now();
    for (uint64_t k = 0; k < curl_.size() && *issued < urls.size(); ++k) {
      Start(k, urls, issued);
      ++active;
    }
    while (active > 0) {
      int running = 0;
      curl_multi_perform(curl_.multi(), &running);
      int left = 0;
      while (CURLMsg* msg = curl_multi_info_read(curl_.multi(), &left)) {
        if (msg->msg != CURLMSG_DONE) continue;
        uint64_t k = 0;
        const Status s = Ended(msg, urls, access_key, &k);
        --active;
        w->objects += s.ok() ? 1 : 0;
        w->bytes += s.ok() ? bytes_ : 0;
        w->errors += s.ok() ? 0 : 1;
        if (first.ok()) first = s;
        if (first.ok() && *issued < urls.size()) {
          Start(k, urls, issued);
          ++active;
        }
      }
      if (active > 0) curl_multi_poll(curl_.multi(), nullptr, 0, 1000, nullptr);
    }
    w->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return first;
  }

 private:
  // Starts the PUT of object *issued on handle k (its buffer tagged with the object's index).
  void Start(uint64_t k, const std::vector<std::string>& urls, uint64_t* issued) {
    const uint64_t i = (*issued)++;
    object_of_[k] = i;
    std::memcpy(buf_.get() + k * bytes_, &i, std::min<uint64_t>(sizeof(i), bytes_));
    sources_[k].sent = 0;
    sources_[k].reply.clear();
    curl_easy_setopt(curl_.easy(k), CURLOPT_URL, urls[i].c_str());
    curl_multi_add_handle(curl_.multi(), curl_.easy(k));
  }
  // Takes the ended transfer `msg` off the multi handle: its handle's index into *k, its Status.
  Status Ended(CURLMsg* msg, const std::vector<std::string>& urls, const std::string& access_key, uint64_t* k) {
    void* priv = nullptr;
    curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &priv);
    *k = reinterpret_cast<uintptr_t>(priv);
    S3Request r;  // only for S3Status's mapping
    r.method = "PUT";
    r.curl = msg->data.result;
    curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &r.http);
    r.text = sources_[*k].reply;
    curl_multi_remove_handle(curl_.multi(), curl_.easy(*k));
    return S3Status(r, "PUT " + urls[object_of_[*k]], access_key);
  }

  uint64_t bytes_;
  std::unique_ptr<std::byte[]> buf_;
  std::vector<PutSource> sources_;
  std::vector<uint64_t> object_of_;
  CurlHandles curl_;  // last: its handles, which point into sources_, are freed first
};

}  // namespace

Result<object::RawRoundTrip> PlainCurlReference(const TierUrl& url, uint64_t object_bytes, uint64_t count,
                                                uint64_t window) {
  KVTIER_ASSIGN_OR_RETURN(S3Options o, ParseS3Options(url));
  S3Http http(o.endpoint);  // curl_global_init; the deletes at the end
  std::vector<std::string> paths(count), urls(count);
  for (uint64_t i = 0; i < count; ++i) {
    paths[i] = "/" + UriEncode(o.bucket, false) + "/" +
               UriEncode(o.prefix + "kvtier-bench-s3-ref:" + std::to_string(::getpid()) + ":" + std::to_string(i), true);
    urls[i] = o.endpoint.base + paths[i];
  }
  window = std::max<uint64_t>(1, std::min(window, count));
  object::RawRoundTrip result;
  uint64_t issued = 0;
  Status put;
  {
    CurlPutWindow puts(o.endpoint, window, object_bytes);
    put = puts.Run(urls, o.endpoint.credentials.access_key, &result.write, &issued);
  }
  if (put.ok()) {
    CurlWindow gets(o.endpoint, window, object_bytes);
    std::vector<std::byte> pattern(object_bytes);
    object::FillReferenceObject(pattern, 0);  // the pattern every object is checked against
    std::vector<std::string> batch(window);
    std::vector<uint8_t> ok;
    std::chrono::duration<double> busy{0};
    for (uint64_t first = 0; first < count; first += window) {
      const uint64_t n = std::min(window, count - first);
      for (uint64_t k = 0; k < n; ++k) batch[k] = urls[first + k];
      const auto t0 = std::chrono::steady_clock::now();
      gets.Get(batch, n, &ok);
      busy += std::chrono::steady_clock::now() - t0;
      for (uint64_t k = 0; k < n; ++k) {
        const bool good = ok[k] && object::ReferenceObjectMatches(gets.Body(k), pattern, first + k);
        result.read.objects += good ? 1 : 0;
        result.read.bytes += good ? object_bytes : 0;
        result.read.errors += good ? 0 : 1;
      }
    }
    result.read.seconds = busy.count();
  }
  for (uint64_t i = 0; i < issued; ++i) {
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
