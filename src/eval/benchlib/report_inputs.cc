// `kvtier report`: reading result files and checking their shape before anything is drawn from them.
// Every field the report reads is checked here for presence and type, so a file of the wrong shape is
// one clear error naming the file and the field, never an exception or a wrong figure.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "eval/benchlib/report.h"
#include "eval/benchlib/results.h"
#include "eval/benchlib/save_bench.h"
#include "core/input_file.h"

namespace kvtier::internal {
namespace {

enum class Kind { kString, kNumber, kUint, kBool, kObject, kArray };

// A field, by its path of object keys ("target/url"). `nullable`: null is allowed (the writer emits
// null where a figure is unknown); `optional`: the key may be absent. A field below a parent that is
// null is not checked.
struct Field {
  const char* path;
  Kind kind;
  bool nullable = false;
  bool optional = false;
};

const char* KindName(Kind k) {
  switch (k) {
    case Kind::kString: return "a string";
    case Kind::kNumber: return "a number";
    case Kind::kUint: return "a non-negative integer";
    case Kind::kBool: return "true or false";
    case Kind::kObject: return "an object";
    case Kind::kArray: return "an array";
  }
  return "?";
}

bool IsKind(const nlohmann::json& v, Kind k) {
  switch (k) {
    case Kind::kString: return v.is_string();
    case Kind::kNumber: return v.is_number();
    case Kind::kUint: return v.is_number_unsigned();
    case Kind::kBool: return v.is_boolean();
    case Kind::kObject: return v.is_object();
    case Kind::kArray: return v.is_array();
  }
  return false;
}

// OK, or InvalidArgument naming `where` and the first field of the wrong shape.
Status CheckFields(const nlohmann::json& doc, const std::vector<Field>& fields, const std::string& where) {
  for (const Field& f : fields) {
    const nlohmann::json* v = &doc;
    bool skip = false;
    const std::string path = f.path;
    for (size_t start = 0; start <= path.size();) {
      const size_t slash = std::min(path.find('/', start), path.size());
      if (v->is_null()) {
        skip = true;  // a null parent: its own entry said whether null is allowed
        break;
      }
      const auto it = v->find(path.substr(start, slash - start));
      if (it == v->end()) {
        // A missing parent was reported by its own entry (or is optional); only the field itself counts.
        if (slash < path.size() || f.optional) {
          skip = true;
          break;
        }
        return Status::InvalidArgument(where + ": field '" + path + "' is missing");
      }
      v = &*it;
      start = slash + 1;
    }
    if (skip || (f.nullable && v->is_null()) || IsKind(*v, f.kind)) continue;
    return Status::InvalidArgument(where + ": field '" + path + "' must be " + KindName(f.kind) +
                                   (f.nullable ? " or null" : "") + ", not " + v->type_name());
  }
  return Status::OK();
}

// Checks `doc[array_key]` is an array whose elements are objects with `fields`.
Status CheckElements(const nlohmann::json& doc, const char* array_key, const std::vector<Field>& fields,
                     const std::string& where) {
  size_t i = 0;
  for (const nlohmann::json& e : doc.at(array_key)) {
    const std::string at = where + ": " + array_key + "[" + std::to_string(i++) + "]";
    if (!e.is_object()) return Status::InvalidArgument(at + " must be an object, not " + e.type_name());
    KVTIER_RETURN_IF_ERROR(CheckFields(e, fields, at));
  }
  return Status::OK();
}

Status CheckDatapath(const nlohmann::json& d, const std::string& where) {
  static const std::vector<Field> kTop = {
      {"started_at", Kind::kString},
      {"repeat", Kind::kUint},
      {"target", Kind::kObject},
      {"target/url", Kind::kString},
      {"target/scheme", Kind::kString},
      {"target/shared", Kind::kBool},
      {"target/cold_method", Kind::kString},
      {"model", Kind::kObject},
      {"model/preset", Kind::kString},
      {"model/layout", Kind::kString},
      {"model/chunk_bytes", Kind::kUint},
      {"sweep", Kind::kArray},
      {"summary", Kind::kObject, true},
      {"summary/best_inflight_bytes", Kind::kUint},
      {"summary/gbps", Kind::kNumber},
      {"summary/p50_us", Kind::kNumber},
      {"summary/p99_us", Kind::kNumber},
      {"summary/fio_gbps", Kind::kNumber, true},
      {"summary/ratio_to_fio", Kind::kNumber, true},
      {"summary/best_fio_gbps", Kind::kNumber, true},
      {"summary/ratio_to_best_fio", Kind::kNumber, true},
      {"summary/serial_gbps", Kind::kNumber, true},
      {"summary/speedup_over_serial", Kind::kNumber, true},
      {"context", Kind::kObject},
      {"context/load_seconds", Kind::kNumber, true},
      {"verdict", Kind::kObject, true},
      {"verdict/description", Kind::kString},
      {"verdict/source", Kind::kString},
      {"verdict/peak_tflops", Kind::kNumber},
      {"verdict/mfu", Kind::kNumber},
      {"verdict/context_tokens", Kind::kUint},
      {"verdict/recompute_seconds", Kind::kNumber},
      {"verdict/ttft_saved_seconds", Kind::kNumber},
      {"verdict/break_even_tokens", Kind::kUint, true},
      {"verify_copy", Kind::kObject, true, true},
      {"verify_copy/gbps", Kind::kNumber},
      {"fio_note", Kind::kString, false, true},
  };
  static const std::vector<Field> kPoint = {
      {"inflight_bytes", Kind::kUint},
      {"kvtier", Kind::kObject},
      {"kvtier/gbps", Kind::kNumber},
      {"kvtier/p50_us", Kind::kNumber},
      {"kvtier/p99_us", Kind::kNumber},
      {"kvtier/errors", Kind::kUint},
      {"kvtier/wrong_bytes", Kind::kUint, false, true},  // of errors; absent in results before it
      {"fio", Kind::kObject, true, true},
      {"fio/gbps", Kind::kNumber},
      {"fio/p50_us", Kind::kNumber},
      {"fio/p99_us", Kind::kNumber},
      {"ratio_to_fio", Kind::kNumber, true, true},
  };
  KVTIER_RETURN_IF_ERROR(CheckFields(d, kTop, where));
  return CheckElements(d, "sweep", kPoint, where);
}

Status CheckE2e(const nlohmann::json& e, const std::string& where) {
  static const std::vector<Field> kTop = {{"model_id", Kind::kString}, {"rows", Kind::kArray}};
  static const std::vector<Field> kRow = {
      {"mode", Kind::kString},          {"concurrency", Kind::kUint},
      {"ttft_p50_ms", Kind::kNumber},   {"ttft_p90_ms", Kind::kNumber},
      {"ttft_p99_ms", Kind::kNumber},   {"speedup_p50", Kind::kNumber, true},
      {"outputs_matched", Kind::kUint}, {"outputs_checked", Kind::kUint},
  };
  KVTIER_RETURN_IF_ERROR(CheckFields(e, kTop, where));
  return CheckElements(e, "rows", kRow, where);
}

Status CheckSave(const nlohmann::json& d, const std::string& where) {
  static const std::vector<Field> kTop = {
      {"started_at", Kind::kString},
      {"target", Kind::kObject},
      {"target/url", Kind::kString},
      {"model", Kind::kObject},
      {"model/preset", Kind::kString},
      {"model/chunk_bytes", Kind::kUint},
      {"feed", Kind::kObject},
      {"feed/context_tokens", Kind::kUint},
      {"feed/gpus", Kind::kUint},
      {"feed/start_rate_gbps", Kind::kNumber},
      {"feed/step_seconds", Kind::kNumber},
      {"steps", Kind::kArray},
      {"fio_write", Kind::kObject, true},
      {"fio_write/gbps", Kind::kNumber},
      {"fio_note", Kind::kString},
      {"summary", Kind::kObject},
      {"summary/highest_drop_free_gbps", Kind::kNumber, true},
      {"summary/fio_write_gbps", Kind::kNumber, true},
      {"summary/ratio_to_fio_write", Kind::kNumber, true},
      {"summary/stop_reason", Kind::kString},
  };
  static const std::vector<Field> kStep = {
      {"target_gbps", Kind::kNumber},  {"offered_gbps", Kind::kNumber},    {"absorbed_gbps", Kind::kNumber},
      {"dropped_saves", Kind::kUint},  {"save_errors", Kind::kUint},       {"queue_max_bytes", Kind::kUint},
      {"save_latency", Kind::kObject}, {"save_latency/p50_ms", Kind::kNumber},
      {"save_latency/p99_ms", Kind::kNumber}, {"save_latency/max_ms", Kind::kNumber}, {"passed", Kind::kBool},
  };
  KVTIER_RETURN_IF_ERROR(CheckFields(d, kTop, where));
  return CheckElements(d, "steps", kStep, where);
}

bool IsString(const nlohmann::json& doc, const char* key, const char* value) {
  const auto it = doc.find(key);
  return it != doc.end() && it->is_string() && it->get<std::string>() == value;
}

// Counts the values and the nesting of a JSON text without building it (nlohmann's SAX interface),
// so the document is parsed into memory only when it is within the stated bound: a 60 MB text of
// tiny nested values would otherwise take gigabytes as a DOM.
class JsonShape : public nlohmann::json_sax<nlohmann::json> {
 public:
  uint64_t values = 0;
  uint64_t depth = 0, max_depth = 0;
  bool Value() { return ++values <= kMaxReportJsonValues; }
  bool Open() {
    max_depth = std::max(max_depth, ++depth);
    return Value() && depth <= kMaxReportJsonDepth;
  }
  bool null() override { return Value(); }
  bool boolean(bool) override { return Value(); }
  bool number_integer(number_integer_t) override { return Value(); }
  bool number_unsigned(number_unsigned_t) override { return Value(); }
  bool number_float(number_float_t, const string_t&) override { return Value(); }
  bool string(string_t&) override { return Value(); }
  bool binary(binary_t&) override { return Value(); }
  bool start_object(std::size_t) override { return Open(); }
  bool key(string_t&) override { return true; }
  bool end_object() override { return --depth, true; }
  bool start_array(std::size_t) override { return Open(); }
  bool end_array() override { return --depth, true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }
};

}  // namespace

Result<ReportInputs> LoadReportInputs(const std::vector<std::string>& paths) {
  ReportInputs in;
  uint64_t values_left = kMaxReportJsonValues;  // the bound holds for all inputs together
  for (const std::string& path : paths) {
    KVTIER_ASSIGN_OR_RETURN(const std::string text, ReadBoundedFile(path, kMaxJsonInputBytes, "result file"));
    JsonShape shape;
    const bool parsed = nlohmann::json::sax_parse(text, &shape, nlohmann::json::input_format_t::json, false);
    if (shape.values > values_left || shape.max_depth > kMaxReportJsonDepth) {
      return Status::InvalidArgument(path + " is too large a JSON document for a bench result (more than " +
                                     std::to_string(kMaxReportJsonValues) + " values in all, or nested deeper than " +
                                     std::to_string(kMaxReportJsonDepth) + ")");
    }
    if (!parsed) return Status::InvalidArgument(path + " is not a JSON object");
    values_left -= shape.values;
    nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (doc.is_discarded() || !doc.is_object()) {
      return Status::InvalidArgument(path + " is not a JSON object");
    }
    const std::string name = std::filesystem::path(path).filename().string();
    if (IsString(doc, "schema", kDatapathSchema)) {
      KVTIER_RETURN_IF_ERROR(CheckDatapath(doc, path));
      in.datapath.emplace_back(name, std::move(doc));
    } else if (IsString(doc, "schema", kSaveSchema)) {
      KVTIER_RETURN_IF_ERROR(CheckSave(doc, path));
      in.save.emplace_back(name, std::move(doc));
    } else if (IsString(doc, "bench", "e2e")) {
      KVTIER_RETURN_IF_ERROR(CheckE2e(doc, path));
      in.e2e.emplace_back(name, std::move(doc));
    } else {
      return Status::InvalidArgument(path + " is neither a `kvtier bench datapath` result (schema " +
                                     std::string(kDatapathSchema) + "), a `kvtier bench save` one (schema " +
                                     std::string(kSaveSchema) + ") nor a `kvtier bench e2e` one");
    }
  }
  return in;
}

}  // namespace kvtier::internal
