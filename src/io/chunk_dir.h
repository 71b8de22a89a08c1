// A chunk directory: the one module through which file:// and fs:// touch their directories.
//
//   <root>/<marker>                                 kind and format version (written once, atomically)
//   <root>/<chunk_root>/<ns hex>/<k[0:2]>[/<k[2:4]>]/<key hex>.kvc      one chunk (core/chunk_format.h)
//   ... beside each final name: its temporaries (io/dir_names.h)
//
// It owns the path layout (fan-out depth is a parameter), the directory marker, the walk, temporary
// naming and the leftover policy, atomic small files, atomic chunk publication, the O_DIRECT probe and
// the corruption test hook. Everything goes through a FileSystem (io/filesystem.h), so no link is
// followed and only regular files are opened. kvtier's own names are the only ones it removes.
//
// Marking: a new tier directory gets its marker at creation. A directory without one is used only when
// it is empty (or, for file://, holds nothing but what earlier builds wrote there); any other content
// is refused with an error, so kvtier never starts working inside a folder of someone else's files.
//
// Read-only: a directory opened read-only is never created, marked, written, touched or cleaned; every
// mutating call returns an error.
// Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "io/chunk_io.h"
#include "io/dir_names.h"
#include "io/filesystem.h"

namespace kvtier::internal {

inline constexpr std::string_view kNamespaceFile = "NAMESPACE";  // a namespace folder's descriptor

struct ChunkDirSpec {
  std::string kind;                  // first line of the marker, e.g. "kvtier-pool"
  std::string marker;                // marker file name, e.g. "KVTIER_POOL"
  uint32_t version = 1;              // format version written (and newest read)
  std::string chunk_root;            // "" (chunks at the top) or a sub-directory such as "v1"
  int fanout_levels = 1;             // directories of two hex characters between namespace and chunk
  std::vector<std::string> own_files;  // other top-level names this tier writes (e.g. "USAGE")
  // Names an earlier build left in an unmarked directory; such a directory is adopted (file:// only).
  std::function<bool(std::string_view name, FileType type)> legacy_entry;
};

struct ChunkDirOptions {
  bool read_only = false;
  bool create = true;                  // create and mark the directory when missing (not read-only)
  std::shared_ptr<FileSystem> fs = nullptr;  // optional: use this instead of the POSIX one (tests)
};

enum class EntryKind : uint8_t {
  kChunk,   // a chunk name (its type may still be wrong: check stat.type)
  kTemp,    // one of kvtier's temporaries
  kLink,    // a symbolic link where kvtier expects its own names: reported, never followed
  kForeign, // a name kvtier did not make: never touched
};

struct WalkEntry {
  std::string rel;
  EntryKind kind = EntryKind::kForeign;
  ChunkId id;                       // kChunk: namespace and key from the path
  std::optional<TempName> temp;     // kTemp
  FileStat stat;                    // lstat of the entry
};

struct WalkCounts {
  uint64_t links = 0;     // links skipped (files or folders)
  uint64_t special = 0;   // FIFOs, sockets, devices skipped
  uint64_t foreign = 0;   // names kvtier did not make
};

// The marker text for `spec` at `version`, and its parser: Corruption when it is not a marker of
// spec.kind, VersionMismatch when newer than spec.version.
std::string EncodeDirMarker(const ChunkDirSpec& spec, uint32_t version);
Result<uint32_t> ParseDirMarker(std::string_view text, const ChunkDirSpec& spec, std::string_view root);

// A chunk written to a temporary beside its name and closed, not yet published.
struct TempChunk {
  std::string rel;            // the temporary, relative to the root
  uint64_t stored_bytes = 0;  // bytes in it
};

// Writes chunk `id` to a fresh temporary beside `rel` (whose directory must exist) and closes it; the
// caller publishes it (rename, link) and removes whatever is left. On failure the temporary is removed.
Result<TempChunk> WriteChunkTemp(FileSystem& fs, const std::string& rel, const ChunkId& id, GatherList payload,
                                 const WriteOptions& options);

// Creates the directories above `rel` (relative to the root) that are missing.
Status MakeChunkParents(FileSystem& fs, std::string_view rel);

// Writes chunk `id` to a fresh temporary beside `rel` (whose directory must exist) and renames it to
// `rel`, so readers see no chunk or a whole one. On any failure the temporary is removed and nothing
// is published. Returns the bytes stored.
Result<uint64_t> WriteChunkFileAtomic(FileSystem& fs, const std::string& rel, const ChunkId& id, GatherList payload,
                                      const WriteOptions& options);

// Where chunk `id` lives, relative to the root: <chunk_root>/<ns hex>/<k[0:2]>[/<k[2:4]>...]/<key>.kvc
std::string ChunkRelPath(const ChunkDirSpec& spec, const ChunkId& id);

class ChunkDir {
 public:
  // Opens (and, unless read-only, creates and marks) the directory at `root`. NotFound for a missing
  // directory or marker when it may not create; InvalidArgument for a directory of other files or of
  // another kind; VersionMismatch for a newer format; Corruption for an unreadable marker.
  static Result<std::unique_ptr<ChunkDir>> Open(const std::string& root, ChunkDirSpec spec,
                                                const ChunkDirOptions& options);

  FileSystem& fs() const { return *fs_; }
  const std::string& root() const { return fs_->root(); }
  bool read_only() const { return read_only_; }
  uint32_t found_version() const { return found_version_; }

  std::string ChunkPath(const ChunkId& id) const { return ChunkRelPath(spec_, id); }
  std::string Describe(std::string_view rel) const { return root() + "/" + std::string(rel); }

  // Writes a chunk to a temporary beside its final name and renames it into place. On failure the
  // temporary is removed and nothing is published. Returns the bytes stored.
  Result<uint64_t> WriteChunk(const ChunkId& id, GatherList payload, const WriteOptions& options);
  // Removes a chunk's file. OK when it was not there.
  Status RemoveChunk(const ChunkId& id);
  // Removes an entry a walk reported as kvtier's (a chunk or temporary); refuses anything else.
  Status RemoveEntry(const WalkEntry& entry);
  Result<FileStat> StatChunk(const ChunkId& id) { return fs_->Stat(ChunkPath(id)); }
  // Refreshes a chunk's mtime (LRU recency). Best effort; nothing in read-only mode.
  void TouchChunk(const ChunkId& id);

  // Small top-level files (the marker, USAGE, ...). ReadSmallFile: NotFound when absent, Corruption
  // when larger than `max_bytes` or not a regular file. WriteSmallFile replaces atomically.
  Result<std::string> ReadSmallFile(std::string_view name, size_t max_bytes = 64 * 1024);
  Status WriteSmallFile(std::string_view name, std::string_view text);

  // A namespace's descriptor, <chunk_root>/<ns hex>/NAMESPACE (kNamespaceFile): display-only text
  // written once, atomically. WriteNamespaceFile creates the namespace folder when missing and keeps an
  // existing descriptor (same namespace id, same identity). ReadNamespaceFile: NotFound when absent,
  // Corruption when larger than `max_bytes` or not a regular file.
  Status WriteNamespaceFile(const Digest& ns, std::string_view text);
  Result<std::string> ReadNamespaceFile(const Digest& ns, size_t max_bytes = 16 * 1024);
  // The descriptor's name or one of its temporaries.
  static bool IsNamespaceFileName(std::string_view name);

  // Whether reads with O_DIRECT work here (opens the marker with O_DIRECT and reads it).
  bool ProbeDirectIo();

  // Visits every entry of the leaf directories until `fn` returns false. Folders that are links or
  // do not carry kvtier's names are skipped and counted. IOError when a directory cannot be read.
  Status Walk(const std::function<bool(const WalkEntry&)>& fn, WalkCounts* counts = nullptr);

  // Whether a top-level or leaf name is one kvtier writes here (for temporaries' final names).
  bool IsOwnFinalName(std::string_view name) const;

  // Tests only: flips the byte at `offset` of a chunk's file behind the tier's back.
  Status CorruptChunkForTesting(const ChunkId& id, uint64_t offset);

 private:
  ChunkDir(std::shared_ptr<FileSystem> fs, ChunkDirSpec spec, bool read_only)
      : fs_(std::move(fs)), spec_(std::move(spec)), read_only_(read_only) {}
  Status Mark(bool create);
  Status CheckAdoptable();
  bool IsMarkerTemp(const DirEntry& e) const;
  // Removes marker temporaries left by a creator that is gone (dead pid, or idle past the grace).
  void RemoveStaleMarkerTemps(const std::vector<DirEntry>& entries);
  static constexpr std::chrono::seconds kMarkerTempGrace{600};
  Status PublishMarker();
  // Writes `text` to the new file `tmp` and fsyncs it; the caller publishes or removes it.
  Status WriteTextTemp(const std::string& tmp, std::string_view text);
  // Whether a top-level entry is one of this tier's own files (marker, small files, their temporaries,
  // or an earlier build's names).
  bool IsOwnTopLevel(const DirEntry& e) const;
  Status RefuseIfReadOnly(std::string_view what) const;
  Status WalkNamespace(const std::string& ns_rel, const Digest& ns, const std::function<bool(const WalkEntry&)>& fn,
                       WalkCounts* counts, bool* stop);
  Status WalkLeaf(const std::string& rel, const Digest& ns, const std::function<bool(const WalkEntry&)>& fn,
                  WalkCounts* counts, bool* stop);

  const std::shared_ptr<FileSystem> fs_;
  const ChunkDirSpec spec_;
  const bool read_only_;
  uint32_t found_version_ = 0;
};

}  // namespace kvtier::internal
