#include "tiers/s3/s3_http.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>

namespace kvtier::s3 {
namespace {

// One transfer's state for the callbacks.
struct Transfer {
  S3Request* r = nullptr;
  CURL* easy = nullptr;
  size_t piece = 0, offset = 0;  // PUT: where in the gather list
  long http = -1;                // learnt at the first body bytes
  std::optional<object::ObjectLander> lander;  // GET of an object: where its body lands
};

// The first body bytes of a 2xx object GET: an object whose Content-Length says it is larger than the
// destination is refused before a byte of it is copied.
bool FitsAtStart(Transfer* t) {
  curl_off_t length = -1;
  curl_easy_getinfo(t->easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length);
  return length < 0 || static_cast<uint64_t>(length) <= t->r->read->Capacity();
}

// A 2xx object GET's body lands in the op's buffers (a larger object stops the transfer: the callback
// takes less than it was given); any other body (listings, errors) goes into text, bounded.
size_t OnBody(char* data, size_t size, size_t n, void* arg) {
  auto* t = static_cast<Transfer*>(arg);
  S3Request* r = t->r;
  const size_t len = size * n;
  const bool first = t->http < 0;
  if (first) curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &t->http);
  if (t->lander && t->http >= 200 && t->http < 300) {
    if ((first && !FitsAtStart(t)) || !t->lander->Append({reinterpret_cast<const std::byte*>(data), len})) {
      r->overflow = true;
      return 0;
    }
    r->received = t->lander->landed();
    return len;
  }
  if (r->text.size() < (1u << 20)) r->text.append(data, std::min<size_t>(len, (1u << 20) - r->text.size()));
  return len;
}

// A finished transfer's results, then its `done`.
void Finished(CURLMsg* msg) {
  S3Request* r = nullptr;
  curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &r);
  r->curl = msg->data.result;
  curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &r->http);
  curl_off_t length = -1;
  curl_easy_getinfo(msg->easy_handle, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length);
  if (r->method != "PUT") r->bytes = length >= 0 ? static_cast<uint64_t>(length) : r->received;
  if (r->overflow && r->curl == CURLE_WRITE_ERROR) r->curl = CURLE_OK;  // we stopped it: the size is known
  if (r->done) r->done(*r);
}

// Feeds a PUT's gather list.
size_t OnRead(char* out, size_t size, size_t n, void* arg) {
  auto* t = static_cast<Transfer*>(arg);
  size_t room = size * n, done = 0;
  while (room > 0 && t->piece < t->r->body.size()) {
    const auto& p = t->r->body[t->piece];
    const size_t take = std::min(room, p.size() - t->offset);
    std::memcpy(out + done, p.data() + t->offset, take);
    done += take;
    room -= take;
    t->offset += take;
    if (t->offset == p.size()) {
      ++t->piece;
      t->offset = 0;
    }
  }
  return done;
}

}  // namespace

void InitCurlOnce() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

curl_slist* SetUpSigning(CURL* e, const S3Endpoint& endpoint) {
  // libcurl copies string options: the temporaries may go.
  curl_easy_setopt(e, CURLOPT_AWS_SIGV4, ("aws:amz:" + endpoint.region + ":s3").c_str());
  curl_easy_setopt(e, CURLOPT_USERPWD,
                   (endpoint.credentials.access_key + ":" + endpoint.credentials.secret_key).c_str());
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  if (std::getenv("KVTIER_S3_DEBUG") != nullptr) curl_easy_setopt(e, CURLOPT_VERBOSE, 1L);
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, static_cast<long>(endpoint.timeout.count()));
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(endpoint.connect_timeout.count()));
  curl_slist* h = curl_slist_append(nullptr, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
  if (!endpoint.credentials.session_token.empty()) {
    h = curl_slist_append(h, ("x-amz-security-token: " + endpoint.credentials.session_token).c_str());
  }
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
  return h;
}

S3Http::S3Http(S3Endpoint endpoint) : endpoint_(std::move(endpoint)) { InitCurlOnce(); }

S3Http::~S3Http() {
  internal::MutexLock lock(mu_);
  for (CURLM* m : idle_) curl_multi_cleanup(m);
}

CURLM* S3Http::TakeMulti() {
  {
    internal::MutexLock lock(mu_);
    if (!idle_.empty()) {
      CURLM* m = idle_.back();
      idle_.pop_back();
      return m;
    }
  }
  CURLM* m = curl_multi_init();
  curl_multi_setopt(m, CURLMOPT_MAX_HOST_CONNECTIONS, 0L);
  return m;
}

void S3Http::GiveBack(CURLM* m) {
  internal::MutexLock lock(mu_);
  idle_.push_back(m);
}

void S3Http::Run(std::span<S3Request*> requests) {
  CURLM* multi = TakeMulti();
  std::vector<CURL*> easies(requests.size(), nullptr);
  std::vector<curl_slist*> headers(requests.size(), nullptr);
  std::vector<Transfer> transfers(requests.size());
  std::vector<std::string> urls(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    S3Request* r = requests[i];
    CURL* e = curl_easy_init();
    easies[i] = e;
    transfers[i].r = r;
    transfers[i].easy = e;
    if (r->read != nullptr) transfers[i].lander.emplace(*r->read);
    urls[i] = endpoint_.base + r->path + (r->query.empty() ? "" : "?" + r->query);
    curl_easy_setopt(e, CURLOPT_URL, urls[i].c_str());
    headers[i] = SetUpSigning(e, endpoint_);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, OnBody);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &transfers[i]);
    if (r->method == "PUT") {
      r->bytes = TotalBytes(r->body);
      curl_easy_setopt(e, CURLOPT_UPLOAD, 1L);
      curl_easy_setopt(e, CURLOPT_READFUNCTION, OnRead);
      curl_easy_setopt(e, CURLOPT_READDATA, &transfers[i]);
      curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(r->bytes));
    } else if (r->method == "HEAD") {
      curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    } else if (r->method != "GET") {
      curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, r->method.c_str());
    }
    curl_easy_setopt(e, CURLOPT_PRIVATE, r);
    curl_multi_add_handle(multi, e);
  }
  // Transfers are ended as they finish, so an object is verified (its `done`) while the others arrive.
  int running = 0;
  do {
    curl_multi_perform(multi, &running);
    int left = 0;
    while (CURLMsg* msg = curl_multi_info_read(multi, &left)) {
      if (msg->msg == CURLMSG_DONE) Finished(msg);
    }
    if (running > 0) curl_multi_poll(multi, nullptr, 0, 1000, nullptr);
  } while (running > 0);
  for (size_t i = 0; i < requests.size(); ++i) {
    curl_multi_remove_handle(multi, easies[i]);
    curl_easy_cleanup(easies[i]);
    curl_slist_free_all(headers[i]);
  }
  GiveBack(multi);
}

Status S3Status(const S3Request& r, const std::string& what, const std::string& access_key) {
  const std::string ctx = "s3: " + what + ": ";
  if (r.curl != CURLE_OK) {
    const bool transient = r.curl == CURLE_COULDNT_CONNECT || r.curl == CURLE_OPERATION_TIMEDOUT ||
                           r.curl == CURLE_RECV_ERROR || r.curl == CURLE_SEND_ERROR || r.curl == CURLE_GOT_NOTHING ||
                           r.curl == CURLE_PARTIAL_FILE || r.curl == CURLE_COULDNT_RESOLVE_HOST;
    return Status::IOError(ctx + curl_easy_strerror(r.curl), transient);
  }
  if (r.http >= 200 && r.http < 300) return Status::OK();
  auto code_in_body = [&](const char* code) { return r.text.find(code) != std::string::npos; };
  if (r.http == 404) return Status::NotFound(ctx + "not found");
  if (code_in_body("QuotaExceeded")) return Status::NoSpace(ctx + "quota exceeded");
  if (r.http == 403 && (code_in_body("InvalidAccessKeyId") || code_in_body("SignatureDoesNotMatch") ||
                        r.method == "HEAD")) {
    return Status::InvalidArgument(ctx + "the endpoint refused access key " + access_key +
                                   " (HTTP 403: wrong credentials?)");
  }
  const bool transient = r.http == 429 || r.http >= 500;
  std::string body = r.text.substr(0, 200);
  return Status::IOError(ctx + "HTTP " + std::to_string(r.http) + (body.empty() ? "" : ": " + body), transient);
}

}  // namespace kvtier::s3
