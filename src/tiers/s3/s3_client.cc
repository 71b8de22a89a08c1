#include "tiers/s3/s3_client.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "tiers/object/client_counters.h"

namespace kvtier::s3 {
namespace {

// The text of the first <tag>...</tag> at or after `from` (XML entities decoded); npos-safe.
std::string XmlValue(const std::string& xml, const std::string& tag, size_t from, size_t* end = nullptr) {
  const std::string open = "<" + tag + ">", close = "</" + tag + ">";
  const size_t b = xml.find(open, from);
  if (b == std::string::npos) return "";
  const size_t e = xml.find(close, b);
  if (e == std::string::npos) return "";
  if (end != nullptr) *end = e + close.size();
  std::string v = xml.substr(b + open.size(), e - b - open.size()), out;
  for (size_t i = 0; i < v.size(); ++i) {
    static const std::pair<const char*, char> kEntities[] = {
        {"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
    bool replaced = false;
    for (const auto& [ent, c] : kEntities) {
      if (v.compare(i, std::strlen(ent), ent) == 0) {
        out += c;
        i += std::strlen(ent) - 1;
        replaced = true;
        break;
      }
    }
    if (!replaced) out += v[i];
  }
  return out;
}

class S3Client final : public object::ObjectClient {
 public:
  explicit S3Client(S3Options o) : opts_(std::move(o)), http_(opts_.endpoint) {}

  Status Init() {
    S3Request head;
    head.method = "HEAD";
    head.path = "/" + UriEncode(opts_.bucket, false);
    RunOne(head);
    Status s = Check(head, "bucket " + opts_.bucket);
    if (!s.IsNotFound()) return s;
    if (!opts_.create_bucket || opts_.read_only) {
      return Status::InvalidArgument("s3: no bucket '" + opts_.bucket + "' at " + opts_.endpoint.base +
                                     " (create it, or pass create_bucket=1)");
    }
    S3Request put;
    put.method = "PUT";
    put.path = head.path;
    RunOne(put);
    return Check(put, "create bucket " + opts_.bucket);
  }

  std::string Describe() const override {
    return "s3://" + opts_.bucket + "/" + opts_.prefix + " at " + opts_.endpoint.base + " (libcurl, SigV4 " +
           opts_.endpoint.region + ", key " + opts_.endpoint.credentials.access_key + ")";
  }

  bool ScatterReads() const override { return true; }

  // The GETs of a batch run in parallel; each body lands straight in its op's buffers, and each op is
  // ended (and `landed` called) on this thread as soon as its transfer is over, while the rest arrive.
  void GetMany(std::span<object::ObjectRead> ops) override {
    std::vector<S3Request> reqs(ops.size());
    for (size_t i = 0; i < ops.size(); ++i) {
      reqs[i].path = Path(ops[i].name);
      reqs[i].read = &ops[i];
      reqs[i].done = [this](S3Request& r) { EndGet(r); };
    }
    RunAll(reqs);
  }

  void PutMany(std::span<object::ObjectWrite> ops) override {
    if (opts_.read_only) {
      for (auto& op : ops) op.status = Status::NotSupported("s3: the tier is open read-only");
      return;
    }
    std::vector<S3Request> reqs(ops.size());
    for (size_t i = 0; i < ops.size(); ++i) {
      reqs[i].method = "PUT";
      reqs[i].path = Path(ops[i].name);
      reqs[i].body = ops[i].data;
    }
    RunAll(reqs);
    for (size_t i = 0; i < ops.size(); ++i) ops[i].status = Check(reqs[i], "PUT " + ops[i].name);
  }

  Status Delete(std::string_view name) override {
    if (opts_.read_only) return Status::NotSupported("s3: the tier is open read-only");
    S3Request r;
    r.method = "DELETE";
    r.path = Path(name);
    RunOne(r);
    Status s = Check(r, "DELETE " + std::string(name));
    return s.IsNotFound() ? Status::OK() : s;
  }

  Result<bool> Exists(std::string_view name) override {
    S3Request r;
    r.method = "HEAD";
    r.path = Path(name);
    RunOne(r);
    Status s = Check(r, "HEAD " + std::string(name));
    if (s.IsNotFound()) return false;
    KVTIER_RETURN_IF_ERROR(s);
    return true;
  }

  Status List(std::string_view prefix, const std::function<bool(const object::ObjectInfo&)>& fn) override {
    std::string token;
    const std::string full = opts_.prefix + std::string(prefix);
    while (true) {
      S3Request r;
      r.path = "/" + UriEncode(opts_.bucket, false);
      r.query = "list-type=2&prefix=" + UriEncode(full, false);
      if (!token.empty()) r.query += "&continuation-token=" + UriEncode(token, false);
      RunOne(r);
      KVTIER_RETURN_IF_ERROR(Check(r, "list " + opts_.bucket));
      size_t at = 0, end = 0;
      while (true) {
        const size_t c = r.text.find("<Contents>", at);
        if (c == std::string::npos) break;
        const std::string key = XmlValue(r.text, "Key", c, &end);
        const std::string size = XmlValue(r.text, "Size", c);
        at = std::max(end, c + 1);
        if (!key.starts_with(opts_.prefix)) continue;
        if (!fn(object::ObjectInfo{key.substr(opts_.prefix.size()), std::strtoull(size.c_str(), nullptr, 10)})) {
          return Status::OK();
        }
      }
      if (XmlValue(r.text, "IsTruncated", 0) != "true") return Status::OK();
      token = XmlValue(r.text, "NextContinuationToken", 0);
      if (token.empty()) return Status::IOError("s3: truncated listing without a continuation token");
    }
  }

  object::ObjectClientStats Stats() const override { return counters_.Snapshot(); }

 private:
  std::string Path(std::string_view name) const {
    return "/" + UriEncode(opts_.bucket, false) + "/" + UriEncode(opts_.prefix + std::string(name), true);
  }
  void RunAll(std::vector<S3Request>& reqs) {
    std::vector<S3Request*> ptrs;
    for (auto& r : reqs) ptrs.push_back(&r);
    counters_.Requests(reqs.size());
    http_.Run(ptrs);
  }
  void RunOne(S3Request& r) {
    S3Request* p = &r;
    counters_.Requests();
    http_.Run(std::span(&p, 1));
  }
  void EndGet(S3Request& r) {
    object::ObjectRead& op = *r.read;
    op.status = Check(r, "GET " + op.name);
    if (!op.status.ok()) {
      op.bytes = 0;  // r.bytes is the error body's
      return;
    }
    // Without a Content-Length an overflowing object's size is unknown: at least one byte past the op.
    const uint64_t bytes = r.overflow ? std::max<uint64_t>(r.bytes, op.Capacity() + 1) : r.bytes;
    object::CompleteLanding(op, bytes, r.received, "s3");
  }
  Status Check(const S3Request& r, const std::string& what) {
    Status s = S3Status(r, what, opts_.endpoint.credentials.access_key);
    if (!s.ok() && !s.IsNotFound()) counters_.Error();
    return s;
  }

  const S3Options opts_;
  S3Http http_;
  object::ClientCounters counters_;
};

}  // namespace

Result<std::unique_ptr<object::ObjectClient>> OpenS3Client(const S3Options& options) {
  auto c = std::make_unique<S3Client>(options);
  KVTIER_RETURN_IF_ERROR(c->Init());
  return std::unique_ptr<object::ObjectClient>(std::move(c));
}

Result<std::unique_ptr<object::ObjectClient>> OpenS3ObjectClient(const TierUrl& url,
                                                                 const object::ObjectClientOptions& options) {
  KVTIER_ASSIGN_OR_RETURN(S3Options o, ParseS3Options(url));
  o.read_only = options.read_only;
  if (options.timeout.count() > 0) o.endpoint.timeout = options.timeout;
  if (options.connect_timeout.count() > 0) o.endpoint.connect_timeout = options.connect_timeout;
  return OpenS3Client(o);
}

}  // namespace kvtier::s3
