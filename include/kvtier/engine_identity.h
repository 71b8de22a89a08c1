// EngineIdentity: everything that decides the byte order and meaning of a block an engine stores.
//
// A connector describes the configuration that wrote a block -- engine and its layout name, the I/O
// path when it changes byte order, model id and weights revision, KV dtype, attention kind, tokens per
// block, K and V head dims, KV heads, tensor/pipeline/context-parallel size and rank, the engine's hash
// scheme and seed -- as named text fields. Its canonical encoding is the input of the namespace id
// (MakeNamespace(identity, layout, tenant)), so two identities that differ in any field never share a
// chunk. The same encoding is kept beside a namespace's chunks (file://, fs://) for `kvtier inspect`;
// that copy is only ever displayed, never trusted.
//
// Encoding (version 1), one line per item, '\n'-terminated:
//   kvtier-engine-identity-v1
//   <name>=<value>            one per field, sorted by name, each name once
// Names: 1..64 of [a-z0-9_]. Values: 0..1024 bytes, none below 0x20 and no 0x7f (so no NUL, newline or
// other control character). A name holds no '=' and a value no '\n', so the encoding is unambiguous;
// new fields are new names and leave every existing encoding unchanged.
// Required fields: "engine" and "model". A field that does not apply is left out, not set to "".
// Value type; thread-compatible.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "kvtier/keys.h"
#include "kvtier/status.h"

namespace kvtier {

class EngineIdentity {
 public:
  static constexpr std::string_view kVersionLine = "kvtier-engine-identity-v1";
  static constexpr size_t kMaxNameBytes = 64;
  static constexpr size_t kMaxValueBytes = 1024;
  static constexpr size_t kMaxFields = 64;

  // InvalidArgument for a malformed name or value, or past kMaxFields. Replaces an existing value.
  Status Set(std::string_view name, std::string_view value);
  std::optional<std::string_view> Get(std::string_view name) const;
  const std::map<std::string, std::string, std::less<>>& fields() const { return fields_; }

  // InvalidArgument unless "engine" and "model" are set and non-empty.
  Status Validate() const;
  // The canonical encoding (above). Call on a valid identity.
  std::string Encode() const;
  // Strict parse of an encoding: the version line, then sorted unique valid fields, nothing else.
  // InvalidArgument for anything that is not exactly an encoding Encode() could have made.
  static Result<EngineIdentity> Parse(std::string_view text);

  static bool ValidName(std::string_view name);
  static bool ValidValue(std::string_view value);

 private:
  std::map<std::string, std::string, std::less<>> fields_;
};

// The namespace of blocks written under `identity` with chunk geometry `layout` for `tenant`. Its id is
// SHA-256 of the same fields as Namespace::Make(identity model, layout, tenant, salt = identity.Encode())
// but behind the domain tag "kvtier-identity-namespace-v2" instead of "kvtier-namespace-v1", so no plain
// namespace's salt can give an identity namespace's id, nor the reverse. (Builds before this domain step
// used the plain tag: their identity namespaces' chunks are misses now, never wrong hits.) The namespace
// carries the encoding so that a Store can describe it in its tiers on first save. InvalidArgument for
// an invalid identity or layout.
Result<Namespace> MakeNamespace(const EngineIdentity& identity, const Layout& layout, std::string_view tenant);

}  // namespace kvtier
