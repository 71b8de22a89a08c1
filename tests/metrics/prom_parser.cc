// The strict Prometheus text-format parser of prom_parser.h; the rule tags (L1, S2, H3, ...) name the
// rules listed there.
#include "metrics/prom_parser.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <set>

namespace kvtier::testing {
namespace {

bool IsNameStart(char c, bool colon) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || (colon && c == ':');
}
bool IsNameChar(char c, bool colon) {
  return IsNameStart(c, colon) || std::isdigit(static_cast<unsigned char>(c));
}

// Length of the name at the start of `s` (0: none). `colon`: a metric name (':' allowed).
size_t NameLength(std::string_view s, bool colon) {
  if (s.empty() || !IsNameStart(s[0], colon)) return 0;
  size_t n = 1;
  while (n < s.size() && IsNameChar(s[n], colon)) ++n;
  return n;
}

bool IsBlank(char c) { return c == ' ' || c == '\t'; }

std::string Lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

bool AllDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// S4: a float as Prometheus writes and reads it.
std::optional<double> ParseValue(std::string_view s) {
  std::string_view body = s;
  bool negative = false;
  if (!body.empty() && (body[0] == '+' || body[0] == '-')) {
    negative = body[0] == '-';
    body.remove_prefix(1);
  }
  const std::string lower = Lower(body);
  if (lower == "inf" || lower == "infinity") {
    return negative ? -HUGE_VAL : HUGE_VAL;
  }
  if (lower == "nan" && body.size() == s.size()) return std::nan("");
  // [digits][.digits][e[+-]digits] with at least one digit in the mantissa.
  size_t i = 0, mantissa_digits = 0;
  while (i < body.size() && std::isdigit(static_cast<unsigned char>(body[i]))) ++i, ++mantissa_digits;
  if (i < body.size() && body[i] == '.') {
    ++i;
    while (i < body.size() && std::isdigit(static_cast<unsigned char>(body[i]))) ++i, ++mantissa_digits;
  }
  if (mantissa_digits == 0) return std::nullopt;
  if (i < body.size() && (body[i] == 'e' || body[i] == 'E')) {
    ++i;
    if (i < body.size() && (body[i] == '+' || body[i] == '-')) ++i;
    if (!AllDigits(body.substr(i))) return std::nullopt;
    i = body.size();
  }
  if (i != body.size()) return std::nullopt;
  return std::strtod(std::string(s).c_str(), nullptr);
}

std::optional<int64_t> ParseTimestamp(std::string_view s) {
  std::string_view digits = s;
  if (!digits.empty() && digits[0] == '-') digits.remove_prefix(1);
  if (!AllDigits(digits) || digits.size() > 19) return std::nullopt;
  errno = 0;
  const long long v = std::strtoll(std::string(s).c_str(), nullptr, 10);
  if (errno != 0) return std::nullopt;
  return static_cast<int64_t>(v);
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

class Parser {
 public:
  Result<PromExposition> Run(std::string_view text) {
    if (!text.empty() && text.back() != '\n') return Status::InvalidArgument("L1: text does not end in \\n");
    size_t start = 0;
    while (start < text.size()) {
      const size_t end = text.find('\n', start);
      ++line_no_;
      KVTIER_RETURN_IF_ERROR(Line(text.substr(start, end - start)));
      start = end + 1;
    }
    line_no_ = 0;
    for (const auto& [name, family] : exp_.families) {
      if (family.type == "histogram") KVTIER_RETURN_IF_ERROR(CheckHistogram(name, family));
      if (family.type == "summary") KVTIER_RETURN_IF_ERROR(CheckSummary(name, family));
    }
    return std::move(exp_);
  }

 private:
  Status Fail(const std::string& what) const {
    return Status::InvalidArgument((line_no_ > 0 ? "line " + std::to_string(line_no_) + ": " : "") + what);
  }

  Status Line(std::string_view line) {
    if (line.find('\r') != std::string_view::npos) return Fail("L1: carriage return");
    if (line.empty()) return Status::OK();
    if (line[0] == '#') return Comment(line);
    return Sample(line);
  }

  // F2: `family` continues the current group or starts a new one that never appeared before.
  Status Enter(const std::string& family) {
    if (family == current_) return Status::OK();
    if (closed_.count(family) != 0) return Fail("F2: family " + family + " appears in two groups");
    if (!current_.empty()) closed_.insert(current_);
    current_ = family;
    return Status::OK();
  }

  Status Comment(std::string_view line) {
    const bool help = line.starts_with("# HELP "), type = line.starts_with("# TYPE ");
    if (!help && !type) return Status::OK();  // C3
    std::string_view rest = line.substr(7);
    const size_t n = NameLength(rest, true);
    if (n == 0) return Fail("C1/C2: bad metric name in HELP or TYPE");
    const std::string name(rest.substr(0, n));
    rest.remove_prefix(n);
    KVTIER_RETURN_IF_ERROR(Enter(name));
    PromFamily& f = exp_.families[name];
    if (help) {
      if (!help_seen_.insert(name).second) return Fail("C1: second HELP for " + name);
      if (rest.empty()) return Status::OK();
      if (rest[0] != ' ') return Fail("C1: no blank after the HELP name");
      return UnescapeHelp(rest.substr(1), f.help);
    }
    if (!f.type.empty()) return Fail("C2: second TYPE for " + name);
    if (!f.samples.empty()) return Fail("C2: TYPE after samples of " + name);
    static const std::set<std::string_view> kTypes = {"counter", "gauge", "histogram", "summary", "untyped"};
    if (rest.empty() || rest[0] != ' ' || kTypes.count(rest.substr(1)) == 0) {
      return Fail("C2: bad TYPE line for " + name);
    }
    f.type = std::string(rest.substr(1));
    return Status::OK();
  }

  Status UnescapeHelp(std::string_view s, std::string& out) {
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] != '\\') {
        out += s[i];
        continue;
      }
      if (++i == s.size() || (s[i] != '\\' && s[i] != 'n')) return Fail("C1: bad escape in HELP");
      out += s[i] == 'n' ? '\n' : '\\';
    }
    return Status::OK();
  }

  // S1-S3: `{...}` at the start of `s`; consumes it.
  Status Labels(std::string_view& s, PromLabels& labels) {
    s.remove_prefix(1);  // '{'
    while (true) {
      if (!s.empty() && s[0] == '}') break;
      const size_t n = NameLength(s, false);
      if (n == 0) return Fail("S1: bad label name");
      const std::string name(s.substr(0, n));
      if (name.starts_with("__")) return Fail("S1: reserved label name " + name);
      s.remove_prefix(n);
      if (!s.starts_with("=\"")) return Fail("S1: label " + name + " without =\"");
      s.remove_prefix(2);
      std::string value;
      while (true) {
        if (s.empty()) return Fail("S2: unterminated label value");
        const char c = s[0];
        s.remove_prefix(1);
        if (c == '"') break;
        if (c != '\\') {
          value += c;
          continue;
        }
        if (s.empty() || (s[0] != '\\' && s[0] != '"' && s[0] != 'n')) return Fail("S2: bad escape in label value");
        value += s[0] == 'n' ? '\n' : s[0];
        s.remove_prefix(1);
      }
      if (!labels.emplace(name, value).second) return Fail("S3: label " + name + " twice");
      if (!s.empty() && s[0] == ',') {
        s.remove_prefix(1);
        continue;
      }
      if (s.empty() || s[0] != '}') return Fail("S1: expected , or } after a label");
      break;
    }
    s.remove_prefix(1);  // '}'
    return Status::OK();
  }

  // F1: the family a sample name belongs to, or "".
  std::string FamilyOf(const std::string& name) const {
    auto declared = [&](const std::string& f) -> std::string {
      auto it = exp_.families.find(f);
      return it == exp_.families.end() ? "" : it->second.type;
    };
    const std::string exact = declared(name);
    if (!exact.empty() && exact != "histogram") return name;
    for (std::string_view suffix : {"_bucket", "_sum", "_count"}) {
      if (!EndsWith(name, suffix)) continue;
      const std::string base = name.substr(0, name.size() - suffix.size());
      const std::string type = declared(base);
      if (type == "histogram" || (type == "summary" && suffix != "_bucket")) return base;
    }
    return "";
  }

  Status Sample(std::string_view line) {
    PromSample sample;
    const size_t n = NameLength(line, true);
    if (n == 0) return Fail("S1: bad metric name");
    sample.name = std::string(line.substr(0, n));
    std::string_view rest = line.substr(n);
    if (!rest.empty() && rest[0] == '{') KVTIER_RETURN_IF_ERROR(Labels(rest, sample.labels));
    std::vector<std::string_view> fields;
    while (!rest.empty()) {
      if (!IsBlank(rest[0])) return Fail("S1: expected a blank before the value");
      while (!rest.empty() && IsBlank(rest[0])) rest.remove_prefix(1);
      if (rest.empty()) return Fail("S1: blank at the end of the line");
      const size_t end = std::min(rest.size(), rest.find_first_of(" \t"));
      fields.push_back(rest.substr(0, end));
      rest.remove_prefix(end);
    }
    if (fields.empty() || fields.size() > 2) return Fail("S4: expected a value and an optional timestamp");
    const auto value = ParseValue(fields[0]);
    if (!value) return Fail("S4: bad value " + std::string(fields[0]));
    sample.value = *value;
    if (fields.size() == 2) {
      sample.timestamp_ms = ParseTimestamp(fields[1]);
      if (!sample.timestamp_ms) return Fail("S4: bad timestamp " + std::string(fields[1]));
    }
    const std::string family = FamilyOf(sample.name);
    if (family.empty()) return Fail("F1: sample " + sample.name + " has no family declared by TYPE before it");
    KVTIER_RETURN_IF_ERROR(Enter(family));
    if (!series_.emplace(sample.name, sample.labels).second) return Fail("F3: duplicate series of " + sample.name);
    PromFamily& f = exp_.families[family];
    if (f.type == "counter" && (sample.value < 0)) return Fail("F4: negative counter " + sample.name);
    if (f.type == "histogram") {
      const bool bucket = EndsWith(sample.name, "_bucket");
      if (bucket != (sample.labels.count("le") == 1)) return Fail("H1: le label on the wrong sample");
      if (bucket && !ParseValue(sample.labels.at("le"))) return Fail("H1: bad le value");
    }
    f.samples.push_back(std::move(sample));
    return Status::OK();
  }

  static bool WholeCount(double v) { return v >= 0 && std::isfinite(v) && v == std::floor(v); }

  Status CheckHistogram(const std::string& name, const PromFamily& f) const {
    struct Series {
      std::vector<std::pair<std::string, double>> buckets;  // le text, count
      int sums = 0, counts = 0;
      double count = 0;
    };
    std::map<PromLabels, Series> series;
    for (const PromSample& s : f.samples) {
      PromLabels key = s.labels;
      key.erase("le");
      Series& r = series[key];
      if (EndsWith(s.name, "_bucket")) {
        r.buckets.emplace_back(s.labels.at("le"), s.value);
      } else if (EndsWith(s.name, "_sum")) {
        ++r.sums;
      } else {
        ++r.counts;
        r.count = s.value;
      }
    }
    for (const auto& [labels, r] : series) {
      if (r.buckets.empty()) return Fail("H2: histogram " + name + " has a series without buckets");
      for (size_t i = 0; i < r.buckets.size(); ++i) {
        if (!WholeCount(r.buckets[i].second)) return Fail("H2: bucket count of " + name + " not a whole number");
        if (i == 0) continue;
        if (!(*ParseValue(r.buckets[i].first) > *ParseValue(r.buckets[i - 1].first))) {
          return Fail("H2: le of " + name + " not increasing");
        }
        if (r.buckets[i].second < r.buckets[i - 1].second) return Fail("H2: bucket counts of " + name + " decrease");
      }
      if (r.buckets.back().first != "+Inf") return Fail("H2: last bucket of " + name + " is not le=\"+Inf\"");
      if (r.sums != 1 || r.counts != 1) return Fail("H3: histogram " + name + " needs one _sum and one _count");
      if (r.count != r.buckets.back().second) return Fail("H3: _count of " + name + " differs from its +Inf bucket");
    }
    return Status::OK();
  }

  Status CheckSummary(const std::string& name, const PromFamily& f) const {
    std::map<PromLabels, std::pair<int, int>> sums_counts;
    for (const PromSample& s : f.samples) {
      if (s.name == name) {
        auto it = s.labels.find("quantile");
        const auto q = it == s.labels.end() ? std::nullopt : ParseValue(it->second);
        if (!q || !(*q >= 0 && *q <= 1)) return Fail("summary " + name + ": bad or missing quantile");
        PromLabels key = s.labels;
        key.erase("quantile");
        sums_counts[key];
      } else {
        (EndsWith(s.name, "_sum") ? sums_counts[s.labels].first : sums_counts[s.labels].second)++;
      }
    }
    for (const auto& [labels, sc] : sums_counts) {
      if (sc.first != 1 || sc.second != 1) return Fail("summary " + name + " needs one _sum and one _count");
    }
    return Status::OK();
  }

  PromExposition exp_;
  size_t line_no_ = 0;
  std::string current_;
  std::set<std::string> closed_, help_seen_;
  std::set<std::pair<std::string, PromLabels>> series_;
};

}  // namespace

std::optional<double> PromExposition::Value(const std::string& name, const PromLabels& labels) const {
  for (const auto& [family_name, family] : families) {
    for (const PromSample& s : family.samples) {
      if (s.name == name && s.labels == labels) return s.value;
    }
  }
  return std::nullopt;
}

std::vector<PromSample> PromExposition::Samples(const std::string& name) const {
  std::vector<PromSample> out;
  for (const auto& [family_name, family] : families) {
    for (const PromSample& s : family.samples) {
      if (s.name == name) out.push_back(s);
    }
  }
  return out;
}

Result<PromExposition> ParsePrometheusText(std::string_view text) { return Parser().Run(text); }

}  // namespace kvtier::testing
