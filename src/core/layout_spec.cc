// The text form of a grouped layout (ParseLayoutSpec, Layout::Spec): one line the C API, Python and
// `kvtier models` share.
#include <algorithm>
#include <charconv>
#include <string>
#include <utility>
#include <vector>

#include "kvtier/layout.h"

namespace kvtier {
namespace {

Status SpecError(std::string_view spec, const std::string& why) {
  return Status::InvalidArgument("layout spec '" + std::string(spec.substr(0, 200)) + "': " + why);
}

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t at = 0;
  while (true) {
    const size_t next = s.find(sep, at);
    out.push_back(s.substr(at, next == std::string_view::npos ? std::string_view::npos : next - at));
    if (next == std::string_view::npos) return out;
    at = next + 1;
  }
}

// A whole decimal number without sign or leading zeros (so one value has one spelling).
bool ParseNumber(std::string_view s, uint64_t max, uint64_t* out) {
  if (s.empty() || (s.size() > 1 && s[0] == '0')) return false;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size() && *out <= max;
}

bool ParseLayerSet(std::string_view s, std::vector<uint32_t>* out) {
  for (std::string_view item : Split(s, '+')) {
    uint64_t a = 0, b = 0, step = 1;
    const size_t slash = item.find('/');
    if (slash != std::string_view::npos) {
      if (!ParseNumber(item.substr(slash + 1), 1u << 16, &step) || step < 2) return false;
      item = item.substr(0, slash);
    }
    const size_t dash = item.find('-');
    if (!ParseNumber(item.substr(0, dash), 1u << 16, &a)) return false;
    b = a;
    if (dash != std::string_view::npos && (!ParseNumber(item.substr(dash + 1), 1u << 16, &b) || b <= a)) return false;
    if (dash == std::string_view::npos && slash != std::string_view::npos) return false;
    for (uint64_t l = a; l <= b; l += step) out->push_back(static_cast<uint32_t>(l));
  }
  return true;
}

// Runs of equal steps: "0-60", "1-47/2", "3", "0+5-9".
std::string LayerSetText(const std::vector<uint32_t>& layers) {
  std::string out;
  for (size_t i = 0; i < layers.size();) {
    size_t j = i + 1;
    const uint32_t step = j < layers.size() ? layers[j] - layers[i] : 1;
    while (j < layers.size() && layers[j] - layers[j - 1] == step) ++j;
    if (j - i < 3 && step != 1) j = i + 1;  // two items of a wide step: print them one by one
    out += out.empty() ? "" : "+";
    out += std::to_string(layers[i]);
    if (j - i > 1) out += "-" + std::to_string(layers[j - 1]) + (step == 1 ? "" : "/" + std::to_string(step));
    i = j;
  }
  return out;
}

Result<GroupKind> ParseKind(std::string_view s) {
  for (GroupKind k : {GroupKind::kKV, GroupKind::kLatent, GroupKind::kWindowKV, GroupKind::kState}) {
    if (s == GroupKindName(k)) return k;
  }
  return Status::InvalidArgument("unknown group kind '" + std::string(s) + "' (kv, window, latent or state)");
}

// Sets one field of `g` from "name=value"; the allowed names depend on the kind.
Status SetField(LayerGroup* g, std::string_view name, std::string_view value, bool* has_v_dim) {
  uint64_t n = 0;
  const bool heads = g->head_split();
  if (name == "layers") {
    if (!ParseLayerSet(value, &g->layers)) return Status::InvalidArgument("bad layer set '" + std::string(value) + "'");
    return Status::OK();
  }
  if (name == "dtype") {
    KVTIER_ASSIGN_OR_RETURN(g->dtype, ParseDType(value));
    return Status::OK();
  }
  const uint64_t max = name == "bytes" ? (4ull << 30) : UINT32_MAX;
  if (!ParseNumber(value, max, &n)) return Status::InvalidArgument("bad number '" + std::string(value) + "'");
  const auto u = static_cast<uint32_t>(n);
  if (heads && name == "heads") {
    g->kv_heads = u;
  } else if (heads && name == "dim") {
    g->k_head_dim = u;
    if (!*has_v_dim) g->v_head_dim = u;
  } else if (heads && name == "v_dim") {
    g->v_head_dim = u;
    *has_v_dim = true;
  } else if (g->kind == GroupKind::kWindowKV && name == "window") {
    g->window = u;
  } else if (g->kind == GroupKind::kLatent && name == "dim") {
    g->latent_dim = u;
  } else if (g->kind == GroupKind::kState && name == "bytes") {
    g->state_bytes = n;
  } else {
    return Status::InvalidArgument("a " + std::string(GroupKindName(g->kind)) + " group has no field '" +
                                   std::string(name) + "'");
  }
  return Status::OK();
}

// "classic:heads=<h>,dim=<d>,dtype=<t>", the whole of a classic layout's groups.
Status ParseClassic(std::string_view text, Layout* l) {
  bool seen[3] = {false, false, false};
  for (std::string_view field : Split(text.substr(8), ',')) {
    const size_t eq = field.find('=');
    const std::string_view name = field.substr(0, eq), value = eq == std::string_view::npos ? "" : field.substr(eq + 1);
    uint64_t n = 0;
    const int at = name == "heads" ? 0 : name == "dim" ? 1 : name == "dtype" ? 2 : -1;
    if (at < 0 || seen[at]) return Status::InvalidArgument("classic: takes heads=, dim= and dtype= once each");
    seen[at] = true;
    if (at == 2) {
      KVTIER_ASSIGN_OR_RETURN(l->dtype, ParseDType(value));
    } else if (!ParseNumber(value, UINT32_MAX, &n)) {
      return Status::InvalidArgument("bad number '" + std::string(value) + "'");
    } else {
      (at == 0 ? l->kv_heads : l->head_dim) = static_cast<uint32_t>(n);
    }
  }
  if (!seen[0] || !seen[1] || !seen[2]) return Status::InvalidArgument("classic: needs heads=, dim= and dtype=");
  return Status::OK();
}

Result<LayerGroup> ParseGroup(std::string_view text) {
  const size_t colon = text.find(':');
  if (colon == std::string_view::npos) return Status::InvalidArgument("a group is <kind>:<fields>");
  LayerGroup g;
  KVTIER_ASSIGN_OR_RETURN(g.kind, ParseKind(text.substr(0, colon)));
  bool has_v_dim = false;
  std::vector<std::string_view> names;
  for (std::string_view field : Split(text.substr(colon + 1), ',')) {
    const size_t eq = field.find('=');
    if (eq == std::string_view::npos) return Status::InvalidArgument("a field is <name>=<value>");
    const std::string_view name = field.substr(0, eq);
    for (std::string_view seen : names) {
      if (seen == name) return Status::InvalidArgument("field '" + std::string(name) + "' given twice");
    }
    names.push_back(name);
    KVTIER_RETURN_IF_ERROR(SetField(&g, name, field.substr(eq + 1), &has_v_dim));
  }
  for (std::string_view required : {"layers", "dtype"}) {
    if (std::find(names.begin(), names.end(), required) == names.end()) {
      return Status::InvalidArgument("a group needs " + std::string(required) + "=");
    }
  }
  return g;
}

std::string GroupText(const LayerGroup& g) {
  std::string out = std::string(GroupKindName(g.kind)) + ":layers=" + LayerSetText(g.layers);
  if (g.head_split()) {
    out += ",heads=" + std::to_string(g.kv_heads) + ",dim=" + std::to_string(g.k_head_dim);
    if (g.v_head_dim != g.k_head_dim) out += ",v_dim=" + std::to_string(g.v_head_dim);
  }
  if (g.kind == GroupKind::kWindowKV) out += ",window=" + std::to_string(g.window);
  if (g.kind == GroupKind::kLatent) out += ",dim=" + std::to_string(g.latent_dim);
  if (g.kind == GroupKind::kState) out += ",bytes=" + std::to_string(g.state_bytes);
  return out + ",dtype=" + std::string(DTypeName(g.dtype));
}

}  // namespace

std::string Layout::Spec() const {
  std::string out = "layers=" + std::to_string(layers) + " tokens=" + std::to_string(tokens_per_chunk);
  if (classic()) {
    return out + " classic:heads=" + std::to_string(kv_heads) + ",dim=" + std::to_string(head_dim) +
           ",dtype=" + std::string(DTypeName(dtype));
  }
  for (const LayerGroup& g : groups) out += " " + GroupText(g);
  return out;
}

Result<Layout> ParseLayoutSpec(std::string_view spec) {
  const std::vector<std::string_view> items = Split(spec, ' ');
  if (items.size() < 3) return SpecError(spec, "expected layers=<n> tokens=<n> and at least one group");
  Layout l;
  uint64_t n = 0;
  if (items[0].substr(0, 7) != "layers=" || !ParseNumber(items[0].substr(7), 1u << 16, &n)) {
    return SpecError(spec, "it starts with layers=<n>");
  }
  l.layers = static_cast<uint32_t>(n);
  if (items[1].substr(0, 7) != "tokens=" || !ParseNumber(items[1].substr(7), UINT32_MAX, &n)) {
    return SpecError(spec, "layers= is followed by tokens=<n>");
  }
  l.tokens_per_chunk = static_cast<uint32_t>(n);
  if (items[2].substr(0, 8) == "classic:") {
    if (items.size() != 3) return SpecError(spec, "a classic layout has no other group");
    if (Status s = ParseClassic(items[2], &l); !s.ok()) return SpecError(spec, s.message());
    if (Status s = l.Validate(); !s.ok()) return SpecError(spec, s.message());
    return l;
  }
  for (size_t i = 2; i < items.size(); ++i) {
    Result<LayerGroup> g = ParseGroup(items[i]);
    if (!g.ok()) return SpecError(spec, g.status().message());
    l.groups.push_back(std::move(*g));
  }
  if (Status s = l.Validate(); !s.ok()) return SpecError(spec, s.message());
  return l;
}

}  // namespace kvtier
