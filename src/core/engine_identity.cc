#include "kvtier/engine_identity.h"

namespace kvtier {
namespace {

bool NameChar(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'; }

}  // namespace

bool EngineIdentity::ValidName(std::string_view name) {
  if (name.empty() || name.size() > kMaxNameBytes) return false;
  for (char c : name) {
    if (!NameChar(c)) return false;
  }
  return true;
}

bool EngineIdentity::ValidValue(std::string_view value) {
  if (value.size() > kMaxValueBytes) return false;
  for (char c : value) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) return false;
  }
  return true;
}

Status EngineIdentity::Set(std::string_view name, std::string_view value) {
  if (!ValidName(name)) {
    return Status::InvalidArgument("engine identity: field name '" + std::string(name.substr(0, kMaxNameBytes)) +
                                   "' is not 1.." + std::to_string(kMaxNameBytes) + " of [a-z0-9_]");
  }
  if (!ValidValue(value)) {
    return Status::InvalidArgument("engine identity: value of '" + std::string(name) +
                                   "' holds a control character or exceeds " + std::to_string(kMaxValueBytes) +
                                   " bytes");
  }
  auto it = fields_.find(name);
  if (it != fields_.end()) {
    it->second = std::string(value);
    return Status::OK();
  }
  if (fields_.size() >= kMaxFields) {
    return Status::InvalidArgument("engine identity: more than " + std::to_string(kMaxFields) + " fields");
  }
  fields_.emplace(std::string(name), std::string(value));
  return Status::OK();
}

std::optional<std::string_view> EngineIdentity::Get(std::string_view name) const {
  auto it = fields_.find(name);
  if (it == fields_.end()) return std::nullopt;
  return std::string_view(it->second);
}

Status EngineIdentity::Validate() const {
  for (std::string_view required : {"engine", "model"}) {
    auto v = Get(required);
    if (!v || v->empty()) {
      return Status::InvalidArgument("engine identity: field '" + std::string(required) + "' is required");
    }
  }
  return Status::OK();
}

std::string EngineIdentity::Encode() const {
  std::string out(kVersionLine);
  out += '\n';
  for (const auto& [name, value] : fields_) {  // std::map: sorted by name
    out += name;
    out += '=';
    out += value;
    out += '\n';
  }
  return out;
}

Result<EngineIdentity> EngineIdentity::Parse(std::string_view text) {
  auto bad = [](std::string_view why) { return Status::InvalidArgument("not an engine identity: " + std::string(why)); };
  const size_t first = text.find('\n');
  if (first == std::string_view::npos || text.substr(0, first) != kVersionLine) return bad("no version line");
  EngineIdentity id;
  std::string_view rest = text.substr(first + 1);
  std::string_view prev;
  while (!rest.empty()) {
    const size_t nl = rest.find('\n');
    if (nl == std::string_view::npos) return bad("last line not terminated");
    const std::string_view line = rest.substr(0, nl);
    rest.remove_prefix(nl + 1);
    const size_t eq = line.find('=');
    if (eq == std::string_view::npos) return bad("a line without '='");
    const std::string_view name = line.substr(0, eq), value = line.substr(eq + 1);
    if (!prev.empty() && !(prev < name)) return bad("fields not sorted or repeated");
    KVTIER_RETURN_IF_ERROR(id.Set(name, value));
    prev = name;
  }
  KVTIER_RETURN_IF_ERROR(id.Validate());
  return id;
}

Result<Namespace> MakeNamespace(const EngineIdentity& identity, const Layout& layout, std::string_view tenant) {
  KVTIER_RETURN_IF_ERROR(identity.Validate());
  const std::string encoding = identity.Encode();
  KVTIER_ASSIGN_OR_RETURN(Namespace ns, Namespace::MakeInDomain(Namespace::kIdentityDomain, *identity.Get("model"),
                                                                 layout, tenant, encoding));
  ns.SetIdentity(encoding);
  return ns;
}

}  // namespace kvtier
