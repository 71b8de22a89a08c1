// A strict parser of the Prometheus text exposition format (version 0.0.4), for tests: it accepts what a
// Prometheus server accepts from kvtier and rejects anything doubtful. The rules it enforces (mirror them
// in any other checker of kvtier's metrics):
//
// Lines
//  L1. The text is a sequence of lines, each ending in "\n" (so a non-empty text ends in "\n"); no "\r".
//      Empty lines are ignored. A line starting with "#" is a comment; any other line is a sample.
// Comments
//  C1. "# HELP <name> <docstring>": <name> a metric name; the docstring may hold any character but
//      escapes only "\\" and "\n" (any other backslash is an error). At most one HELP per name.
//  C2. "# TYPE <name> <type>", type one of counter, gauge, histogram, summary, untyped, nothing after it.
//      At most one TYPE per name, and it comes before every sample of its family.
//  C3. Any other line starting with "#" is a plain comment and is ignored.
// Samples: <name>[{<label>="<value>"[,<label>="<value>"]*[,]}] <value>[ <timestamp>]
//  S1. Metric name [a-zA-Z_:][a-zA-Z0-9_:]*; label name [a-zA-Z_][a-zA-Z0-9_]* not starting with "__".
//      No blank inside the braces except within quoted values; one or more spaces or tabs before the
//      value and before the timestamp; none at the end of the line, none before the name.
//  S2. Label values escape only "\\", "\"" and "\n"; any other backslash, or a raw '"', is an error.
//  S3. A label name appears at most once in a sample.
//  S4. Value: a decimal float ([+-]digits[.digits][e[+-]digits], or [.digits]), or NaN, +Inf, -Inf, Inf
//      (case-insensitive, as Prometheus' float parser takes them); no hex, no "_". Timestamp: an integer
//      of milliseconds ([-]digits, fits int64).
// Families
//  F1. Every sample belongs to a family declared by a TYPE line before it: for counter, gauge, untyped
//      the sample name is the family name; for histogram <family>_bucket, _sum, _count; for summary
//      <family>, _sum, _count. (A name matches the longest declared family first: exact name, then
//      suffixes.)
//  F2. The samples of one family form one contiguous group: once another family's TYPE, HELP or sample
//      follows, no line of the earlier family may come back.
//  F3. No two samples with the same name and the same label set (in any order): no duplicate series.
//  F4. Counter values are >= 0 (or NaN), never -Inf.
// Histograms (per series: the labels without "le")
//  H1. A _bucket sample has an "le" label holding a float (S4); _sum and _count have none.
//  H2. Buckets come in strictly increasing le order and their counts never decrease; the last is
//      le="+Inf" (written exactly so). Counts are whole numbers >= 0.
//  H3. Each series has exactly one _sum and one _count, and _count equals the +Inf bucket's count.
// Summaries: the <family> samples carry a "quantile" label in [0, 1]; _sum and _count as H3's first half.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::testing {

using PromLabels = std::map<std::string, std::string>;

struct PromSample {
  std::string name;
  PromLabels labels;
  double value = 0;
  std::optional<int64_t> timestamp_ms;
};

struct PromFamily {
  std::string type;  // counter, gauge, histogram, summary, untyped
  std::string help;  // unescaped
  std::vector<PromSample> samples;
};

struct PromExposition {
  std::map<std::string, PromFamily> families;

  // The value of the one sample with this name and exactly these labels, if there is one.
  std::optional<double> Value(const std::string& name, const PromLabels& labels = {}) const;
  // Every sample named `name`, in order.
  std::vector<PromSample> Samples(const std::string& name) const;
};

// InvalidArgument naming the line and the rule broken, or the parsed exposition.
Result<PromExposition> ParsePrometheusText(std::string_view text);

}  // namespace kvtier::testing
