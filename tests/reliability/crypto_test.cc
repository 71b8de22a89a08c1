// Encrypted chunks against a hostile co-tenant with write access to the tier directory (file://, fs://,
// both read engines): forged chunks (payload changed, every checksum rewritten), another tenant's
// chunks, plain chunks planted into an encrypted tier, cut or extended files, flipped tags, reused or
// swapped nonces, reordered pieces. Every one must be rejected (Corruption, a miss, removed) and leave
// the caller's destination zeroed: no byte of the planted chunk. A tier without the key never serves
// an encrypted chunk's bytes. Also the key file rules and the Store's key_file option.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/chunk_cipher.h"
#include "core/chunk_format.h"
#include "io/chunk_dir.h"
#include "io/chunk_io.h"
#include "kvtier/store.h"
#include "kvtier/tier.h"
#include "reliability/test_util.h"

namespace kvtier::reltest {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<char>;

constexpr std::byte kPattern{0xAB};

Bytes ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void WriteFile(const std::string& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A key file of 32 bytes from `seed`, mode 0600.
std::string MakeKeyFile(const std::string& dir, uint32_t seed) {
  std::mt19937 rng(seed);
  Bytes key(32);
  for (char& c : key) c = static_cast<char>(rng());
  const std::string path = dir + "/key-" + std::to_string(seed);
  WriteFile(path, key);
  ::chmod(path.c_str(), 0600);
  return path;
}

std::string ChunkFileOf(const std::string& dir, const ChunkId& id) {
  const std::string hex = id.key.Hex();
  auto files = FilesUnder(dir, [&](const std::string& n) { return IsChunkName(n) && n.rfind(hex, 0) == 0; });
  return files.size() == 1 ? files[0] : std::string();
}

// Rewrites a chunk file's header through `edit`, recomputing the header checksum (an attacker with
// write access can do this; only the key is out of reach).
void EditHeader(const std::string& path, const std::function<void(internal::ChunkHeader&, Bytes&)>& edit) {
  Bytes f = ReadFile(path);
  auto h = internal::DecodeChunkHeader(std::as_bytes(std::span(f)).first(internal::kChunkHeaderSize));
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  edit(*h, f);
  internal::EncodeChunkHeader(*h, std::span<std::byte, internal::kChunkHeaderSize>(
                                      reinterpret_cast<std::byte*>(f.data()), internal::kChunkHeaderSize));
  WriteFile(path, f);
}

// Scheme and extra URL options: both engines of fs://, file://.
class CryptoMatrix : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    key_a_ = MakeKeyFile(tmp_.path(), 1);
    key_b_ = MakeKeyFile(tmp_.path(), 2);
  }
  std::string Scheme() const { return GetParam().substr(0, GetParam().find('?')); }
  std::string Extra() const {
    const size_t q = GetParam().find('?');
    return q == std::string::npos ? "" : "&" + GetParam().substr(q + 1);
  }
  std::unique_ptr<Tier> Open(const std::string& dir, const std::string& key_file) {
    std::string url = Scheme() + "://" + dir + "?direct=false" + Extra();
    if (!key_file.empty()) url += "&key_file=" + key_file;
    auto t = OpenTier(url);
    if (!t.ok()) {
      ADD_FAILURE() << url << ": " << t.status().ToString();
      return nullptr;
    }
    return std::move(t).value();
  }
  // Reads `id` into a pattern-filled buffer of `bytes`; returns the status and checks the buffer is
  // either the expected payload (OK) or all zero (failure).
  Status GetChecked(Tier& tier, const ChunkId& id, size_t bytes, const std::vector<std::byte>& want) {
    std::vector<std::byte> dst(bytes, kPattern);
    const std::span<std::byte> piece(dst);
    const Status s = tier.Get(id, ScatterList(&piece, 1));
    if (s.ok()) {
      EXPECT_EQ(dst, want) << "served bytes differ from what was stored";
    } else {
      EXPECT_TRUE(std::all_of(dst.begin(), dst.end(), [](std::byte b) { return b == std::byte{0}; }))
          << "a failed read left bytes in the destination: " << s.ToString();
    }
    return s;
  }

  TempDir tmp_;
  std::string key_a_, key_b_;
};

// One injection: a chunk id, the payload the victim stored, and a function that damages its file.
struct Attack {
  std::string name;
  std::function<void(const std::string& victim_file, const ChunkId& id, size_t bytes)> run;
};

TEST_P(CryptoMatrix, EveryAttackIsRejectedAndLeavesNoBytes) {
  const std::string dir = tmp_.path() + "/victim", evil = tmp_.path() + "/attacker";
  auto victim = Open(dir, key_a_);
  auto plain = Open(evil + "-plain", "");        // the attacker's own tier, no key
  auto other_key = Open(evil + "-keyb", key_b_);  // another tenant's key
  ASSERT_TRUE(victim && plain && other_key);
  const Namespace ns = MakeNamespace("tenant-a"), other_ns = MakeNamespace("tenant-b");
  // Small chunks and one of 2.5 MiB (three pieces), so piece order matters.
  const size_t big = (5u << 20) / 2;

  auto put = [](Tier& t, const ChunkId& id, const std::vector<std::byte>& p) {
    const std::span<const std::byte> piece(p);
    ASSERT_TRUE(t.Put(id, GatherList(&piece, 1)).ok());
  };
  // Copies the file `from_tier_dir` holds for `id` over `victim_file`.
  auto plant = [&](const std::string& from_dir, const ChunkId& id, const std::string& victim_file) {
    const std::string f = ChunkFileOf(from_dir, id);
    ASSERT_FALSE(f.empty());
    fs::copy_file(f, victim_file, fs::copy_options::overwrite_existing);
  };
  const std::vector<Attack> attacks = {
      {"payload byte changed, header checksum rewritten",
       [&](const std::string& f, const ChunkId&, size_t) {
         EditHeader(f, [](internal::ChunkHeader&, Bytes& b) { b[internal::kChunkHeaderSize + 3] ^= 1; });
       }},
      {"turned plain: flag cleared, piece sums of the bytes written, checksum rewritten",
       [&](const std::string& f, const ChunkId&, size_t) {
         EditHeader(f, [](internal::ChunkHeader& h, Bytes& b) {
           h.flags = 0;
           h.nonce_base = {};
           h.piece_tags.clear();
           h.piece_sums.resize(h.piece_count);
           const auto payload = std::as_bytes(std::span(b)).subspan(internal::kChunkHeaderSize);
           for (uint32_t i = 0; i < h.piece_count; ++i) {
             h.piece_sums[i] = internal::PayloadChecksum(payload.subspan(h.PieceOffset(i), h.PieceLength(i)));
           }
         });
       }},
      {"plain chunk of the same id planted",
       [&](const std::string& f, const ChunkId& id, size_t bytes) {
         put(*plain, id, PayloadFor(id, bytes));
         plant(evil + "-plain", id, f);
       }},
      {"same id sealed under another tenant's key",
       [&](const std::string& f, const ChunkId& id, size_t bytes) {
         put(*other_key, id, PayloadFor(id, bytes));
         plant(evil + "-keyb", id, f);
       }},
      {"another namespace's chunk copied into place",
       [&](const std::string& f, const ChunkId& id, size_t bytes) {
         ChunkId o = id;
         o.ns = ChunkId::Of(other_ns, id.key).ns;
         put(*other_key, o, PayloadFor(o, bytes));
         const std::string src = ChunkFileOf(evil + "-keyb", o);
         ASSERT_FALSE(src.empty());
         fs::copy_file(src, f, fs::copy_options::overwrite_existing);
       }},
      {"tag byte flipped, checksum rewritten",
       [&](const std::string& f, const ChunkId&, size_t) {
         EditHeader(f, [](internal::ChunkHeader& h, Bytes&) { h.piece_tags[0][5] ^= std::byte{0x20}; });
       }},
      {"nonce of another write reused, checksum rewritten",
       [&](const std::string& f, const ChunkId& id, size_t bytes) {
         ChunkId o = id;
         o.key.bytes[0] ^= 0x55;
         put(*victim, o, PayloadFor(o, bytes));  // a genuine chunk of the victim, other nonce
         const Bytes donor = ReadFile(ChunkFileOf(dir, o));
         EditHeader(f, [&](internal::ChunkHeader& h, Bytes&) {
           std::memcpy(h.nonce_base.data(), donor.data() + 112, internal::kNonceBytes);
         });
       }},
      {"layout field changed, checksum rewritten",
       [&](const std::string& f, const ChunkId&, size_t) {
         EditHeader(f, [](internal::ChunkHeader& h, Bytes&) { h.id.layout_fingerprint = 0; });
       }},
      {"file truncated",
       [&](const std::string& f, const ChunkId&, size_t) { fs::resize_file(f, fs::file_size(f) - 4096); }},
      {"file extended",
       [&](const std::string& f, const ChunkId&, size_t) { fs::resize_file(f, fs::file_size(f) + 4096); }},
  };
  const std::vector<Attack> big_only = {
      {"pieces swapped with their tags",
       [&](const std::string& f, const ChunkId&, size_t) {
         EditHeader(f, [](internal::ChunkHeader& h, Bytes& b) {
           std::swap(h.piece_tags[0], h.piece_tags[1]);
           char* p = b.data() + internal::kChunkHeaderSize;
           std::swap_ranges(p, p + h.piece_bytes, p + h.piece_bytes);
         });
       }},
  };
  uint64_t injected = 0, rejected = 0;
  uint32_t seed = 100;
  auto attack_one = [&](const Attack& a, size_t bytes) {
    const ChunkKey key = Keys(ns, 1, seed++)[0];
    ChunkId id = ChunkId::Of(ns, key);
    const std::vector<std::byte> payload = PayloadFor(id, bytes);
    put(*victim, id, payload);
    ASSERT_TRUE(GetChecked(*victim, id, bytes, payload).ok()) << "the genuine chunk must read back";
    const std::string f = ChunkFileOf(dir, id);
    ASSERT_FALSE(f.empty());
    a.run(f, id, bytes);
    ++injected;
    const Status s = GetChecked(*victim, id, bytes, payload);
    EXPECT_TRUE(s.IsCorruption()) << a.name << " (" << bytes << " bytes): " << s.ToString();
    rejected += s.IsCorruption();
    EXPECT_FALSE(victim->Contains(id)) << a.name << ": not removed";
  };
  for (const Attack& a : attacks) {
    attack_one(a, ns.layout().BytesPerChunk());
    attack_one(a, big);
  }
  for (const Attack& a : big_only) attack_one(a, big);
  EXPECT_EQ(injected, rejected);
  std::printf("[crypto] %s: attacks injected %llu, rejected %llu\n", GetParam().c_str(),
              static_cast<unsigned long long>(injected), static_cast<unsigned long long>(rejected));
}

TEST_P(CryptoMatrix, WithoutTheKeyNoPlaintextAndNoCiphertext) {
  const std::string dir = tmp_.path() + "/tier";
  const Namespace ns = MakeNamespace("tenant-a");
  const ChunkId id = ChunkId::Of(ns, Keys(ns, 1, 5)[0]);
  const size_t bytes = ns.layout().BytesPerChunk();
  const std::vector<std::byte> payload = PayloadFor(id, bytes);
  {
    auto keyed = Open(dir, key_a_);
    ASSERT_TRUE(keyed);
    const std::span<const std::byte> piece(payload);
    ASSERT_TRUE(keyed->Put(id, GatherList(&piece, 1)).ok());
  }
  // The file holds no run of the plaintext.
  const Bytes file = ReadFile(ChunkFileOf(dir, id));
  const auto* p = reinterpret_cast<const char*>(payload.data());
  EXPECT_EQ(std::search(file.begin(), file.end(), p, p + 64), file.end()) << "plaintext found on disk";
  auto keyless = Open(dir, "");
  ASSERT_TRUE(keyless);
  const Status s = GetChecked(*keyless, id, bytes, payload);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_NE(s.message().find("encrypted"), std::string::npos) << s.ToString();
}

TEST_P(CryptoMatrix, NoncesAreFreshPerWrite) {
  const Namespace ns = MakeNamespace("tenant-a");
  const ChunkId id = ChunkId::Of(ns, Keys(ns, 1, 6)[0]);
  const std::vector<std::byte> payload = PayloadFor(id, ns.layout().BytesPerChunk());
  std::vector<Bytes> files;
  for (int i = 0; i < 2; ++i) {
    const std::string dir = tmp_.path() + "/w" + std::to_string(i);
    auto t = Open(dir, key_a_);
    ASSERT_TRUE(t);
    const std::span<const std::byte> piece(payload);
    ASSERT_TRUE(t->Put(id, GatherList(&piece, 1)).ok());
    files.push_back(ReadFile(ChunkFileOf(dir, id)));
  }
  ASSERT_EQ(files[0].size(), files[1].size());
  EXPECT_FALSE(std::equal(files[0].begin() + 112, files[0].begin() + 124, files[1].begin() + 112)) << "nonce reused";
  EXPECT_FALSE(std::equal(files[0].begin() + 4096, files[0].end(), files[1].begin() + 4096));
}

TEST_P(CryptoMatrix, ScrubAuthenticates) {
  const std::string dir = tmp_.path() + "/tier";
  auto tier = Open(dir, key_a_);
  ASSERT_TRUE(tier);
  const Namespace ns = MakeNamespace("tenant-a");
  const ChunkId id = ChunkId::Of(ns, Keys(ns, 1, 8)[0]);
  const std::vector<std::byte> payload = PayloadFor(id, ns.layout().BytesPerChunk());
  const std::span<const std::byte> piece(payload);
  ASSERT_TRUE(tier->Put(id, GatherList(&piece, 1)).ok());
  const ChunkInfo info{id, internal::StoredChunkBytes(payload.size())};
  EXPECT_TRUE(tier->Check(info).ok());
  EditHeader(ChunkFileOf(dir, id), [](internal::ChunkHeader&, Bytes& b) { b[internal::kChunkHeaderSize] ^= 1; });
  EXPECT_TRUE(tier->Check(info).IsCorruption());
}

INSTANTIATE_TEST_SUITE_P(Tiers, CryptoMatrix, ::testing::Values("file", "fs", "fs?io_uring=false"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace_if(n.begin(), n.end(), [](char c) { return !std::isalnum(c); }, '_');
                           return n;
                         });

// Every read engine, into the destination and through a bounce buffer: a failed read zeroes it.
TEST(CryptoReaders, FailedReadsZeroTheDestinationInEveryEngine) {
  TempDir tmp;
  const std::string key = MakeKeyFile(tmp.path(), 3);
  auto cipher = internal::ChunkCipher::FromKeyFile(key);
  ASSERT_TRUE(cipher.ok()) << cipher.status().ToString();
  const Namespace ns = MakeNamespace("tenant-a");
  const ChunkId id = ChunkId::Of(ns, Keys(ns, 1, 9)[0]);
  const size_t bytes = 3u << 20;  // three pieces, 4 KiB multiples: eligible for reading in place
  const std::vector<std::byte> payload = PayloadFor(id, bytes);
  const std::span<const std::byte> src(payload);
  auto dir_fs = internal::OpenPosixFileSystem(tmp.path());
  ASSERT_TRUE(dir_fs.ok());
  const std::string good = tmp.path() + "/good.kvc", forged = tmp.path() + "/forged.kvc";
  internal::WriteOptions wo;
  wo.cipher = *cipher;
  ASSERT_TRUE(internal::WriteChunkFileAtomic(**dir_fs, "good.kvc", id, GatherList(&src, 1), wo).ok());
  fs::copy_file(good, forged);
  // The last piece changed: with parallel verification the failing piece is not the first one checked.
  EditHeader(forged, [](internal::ChunkHeader&, Bytes& b) { b[b.size() - 5000] ^= 1; });
  alignas(4096) static std::byte aligned[2][3u << 20];
  for (bool uring : {true, false}) {
    for (bool in_place : {true, false}) {
      for (unsigned verify_threads : {0u, 2u}) {
        internal::ReaderOptions o;
        o.direct_io = false;
        o.use_io_uring = uring;
        o.read_into_destination = in_place;
        o.verify_threads = verify_threads;
        o.cipher = *cipher;
        auto reader = internal::ChunkReader::Create(o);
        std::fill(std::begin(aligned[0]), std::end(aligned[0]), kPattern);
        std::fill(std::begin(aligned[1]), std::end(aligned[1]), kPattern);
        const std::span<std::byte> a(aligned[0]), b(aligned[1]);
        internal::ChunkRead reads[2];
        reads[0].fs = reads[1].fs = dir_fs->get();
        reads[0].path = "good.kvc";
        reads[1].path = "forged.kvc";
        reads[0].expected = reads[1].expected = id;
        reads[0].dst = ScatterList(&a, 1);
        reads[1].dst = ScatterList(&b, 1);
        reader->ReadMany(reads);
        const std::string where = std::string(reader->engine()) + " in_place=" + std::to_string(in_place) +
                                  " verify_threads=" + std::to_string(verify_threads);
        EXPECT_TRUE(reads[0].status.ok()) << where << ": " << reads[0].status.ToString();
        EXPECT_TRUE(std::equal(a.begin(), a.end(), payload.begin())) << where;
        EXPECT_TRUE(reads[1].status.IsCorruption()) << where;
        EXPECT_TRUE(std::all_of(b.begin(), b.end(), [](std::byte x) { return x == std::byte{0}; })) << where;
      }
    }
  }
}

TEST(CryptoKeyFile, RulesAndNoKeyBytesInMessages) {
  TempDir tmp;
  const std::string dir = tmp.path();
  auto write = [&](const std::string& name, const std::string& text, mode_t mode) {
    const std::string p = dir + "/" + name;
    WriteFile(p, Bytes(text.begin(), text.end()));
    ::chmod(p.c_str(), mode);
    return p;
  };
  const std::string hex = "00112233445566778899aabbccddeeff00112233445566778899AABBCCDDEEFF";
  EXPECT_TRUE(internal::ChunkCipher::FromKeyFile(write("hex", hex, 0600)).ok());
  EXPECT_TRUE(internal::ChunkCipher::FromKeyFile(write("hexnl", hex + "\n", 0400)).ok());
  EXPECT_TRUE(internal::ChunkCipher::FromKeyFile(write("raw", std::string(32, 'k'), 0600)).ok());
  const auto refused = [&](const std::string& p) {
    auto c = internal::ChunkCipher::FromKeyFile(p);
    EXPECT_EQ(c.status().code(), Code::kInvalidArgument) << p;
    EXPECT_EQ(c.status().message().find("00112233"), std::string::npos) << "key bytes in a message";
  };
  refused(write("groupread", hex, 0640));
  refused(write("worldread", hex, 0604));
  refused(write("short", hex.substr(0, 63), 0600));
  refused(write("long", hex + "00", 0600));
  refused(write("badhex", "zz" + hex.substr(2), 0600));
  refused(write("zeros", std::string(32, '\0'), 0600));
  refused(dir);                  // a directory
  refused(dir + "/missing");
  refused("relative/key");
  fs::create_symlink(dir + "/hex", dir + "/link");
  refused(dir + "/link");        // a link is not followed
  EXPECT_FALSE(OpenTier("file://" + dir + "/t?key_file=" + dir + "/groupread").ok());
  EXPECT_FALSE(OpenTier("fs://" + dir + "/p?key_file=" + dir + "/short").ok());
}

TEST(CryptoStore, KeyFileOptionEncryptsPersistentTiersAndFailedLoadsAreZeroed) {
  TempDir tmp;
  const std::string key = MakeKeyFile(tmp.path(), 4);
  const Namespace ns = MakeNamespace("tenant-a");
  const std::vector<ChunkKey> keys = Keys(ns, 4, 10);
  const size_t bytes = ns.layout().BytesPerChunk();
  StoreOptions o;
  o.tiers = {"file://" + tmp.path() + "/file?direct=false"};
  o.key_file = key;
  {
    auto store = Store::Open(o);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    SaveSources src(ns, keys);
    ASSERT_TRUE((*store)->Save(ns, keys, src.srcs).ok());
    ASSERT_TRUE((*store)->Flush().ok());
    LoadBuffers dst(keys.size(), bytes);
    auto n = (*store)->Load(ns, keys, dst.dsts);
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(*n, keys.size());
    EXPECT_EQ(dst.CountExact(ns, keys, keys.size()), keys.size());
  }
  // The chunks on disk are encrypted: a keyless tier cannot read them (and removes what it cannot verify).
  auto keyless = OpenTier("file://" + tmp.path() + "/file?direct=false");
  ASSERT_TRUE(keyless.ok());
  std::vector<std::byte> buf(bytes, kPattern);
  const std::span<std::byte> piece(buf);
  EXPECT_TRUE((*keyless)->Get(ChunkId::Of(ns, keys[3]), ScatterList(&piece, 1)).IsCorruption());
  EXPECT_TRUE(std::all_of(buf.begin(), buf.end(), [](std::byte b) { return b == std::byte{0}; }));
  keyless->reset();
  // Forge chunk 1: the Store loads chunk 0 only; chunks 1 and 2 were read, and their destinations are
  // zeroed; chunk 3 (removed above) is not looked for, so its destination keeps the caller's bytes.
  EditHeader(ChunkFileOf(tmp.path() + "/file", ChunkId::Of(ns, keys[1])),
             [](internal::ChunkHeader&, Bytes& b) { b[internal::kChunkHeaderSize + 1] ^= 1; });
  auto store = Store::Open(o);
  ASSERT_TRUE(store.ok());
  LoadBuffers dst(keys.size(), bytes);
  for (auto& d : dst.data) std::fill(d.begin(), d.end(), kPattern);
  auto n = (*store)->Load(ns, keys, dst.dsts);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 1u);
  EXPECT_EQ(dst.data[3], std::vector<std::byte>(bytes, kPattern));
  for (size_t i = 1; i < 3; ++i) {
    EXPECT_TRUE(std::all_of(dst.data[i].begin(), dst.data[i].end(), [](std::byte b) { return b == std::byte{0}; }))
        << "destination " << i;
  }
  // A URL naming another key than the Store's is refused.
  o.tiers = {"file://" + tmp.path() + "/file?key_file=" + MakeKeyFile(tmp.path(), 5)};
  EXPECT_EQ(Store::Open(o).status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace kvtier::reltest
