// The Store over mem:// and objmem:// (the object tier over the fake store): an object tier that
// fails is a soft failure; the Store serves on.
#include "tiers/object/object_test_util.h"
#include "core/chunk_format.h"
#include "store/store_fixture.h"
#include "support/temp_dir.h"

namespace kvtier::testing {
namespace {

class ObjectStoreTest : public StoreTestBase {
 protected:
  void SetUp() override { RegisterObjmemScheme(); }
  std::unique_ptr<Store> OpenStore(const std::string& path) {
    StoreOptions o;
    o.tiers = {"mem://?capacity=64KiB&page=64", "objmem://" + path + "?retries=2&backoff_ms=0"};
    auto s = Store::Open(o);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }
};

TEST_F(ObjectStoreTest, FailingObjectTierLeavesTheStoreServing) {
  auto store = OpenStore("/store-failing");
  ASSERT_NE(store, nullptr);
  const auto keys = Keys(6);
  ASSERT_TRUE(Save(*store, keys).ok());
  ASSERT_TRUE(store->Flush().ok());
  auto fake = FakeStoreAt("/store-failing");
  EXPECT_EQ(fake->size(), keys.size());  // written through to the object tier
  fake->FailAlways(Status::IOError("cluster down", /*retryable=*/true));
  auto n = Load(*store, keys);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, keys.size());  // from mem://
  const auto more = Keys(3, 2);
  EXPECT_TRUE(Save(*store, more).ok());
  EXPECT_TRUE(store->Flush().ok());
  EXPECT_GE(store->Stats().tiers[1].dropped_saves, 1u);
  n = Load(*store, more);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, more.size());
  fake->ClearFaults();
}

TEST_F(ObjectStoreTest, ObjectStoreFullIsADroppedSave) {
  auto store = OpenStore("/store-full");
  ASSERT_NE(store, nullptr);
  auto fake = FakeStoreAt("/store-full");
  fake->FailPuts(Status::NoSpace("OOM command not allowed when used memory > 'maxmemory'"));
  const auto keys = Keys(4);
  EXPECT_TRUE(Save(*store, keys).ok());
  EXPECT_TRUE(store->Flush().ok());
  const StoreStats s = store->Stats();
  EXPECT_EQ(fake->size(), 0u);
  EXPECT_EQ(s.tiers[1].dropped_saves, keys.size());
  EXPECT_EQ(s.tiers[1].put_errors, keys.size());
  auto n = Load(*store, keys);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, keys.size());
}

TEST_F(ObjectStoreTest, StoreKeyFileEncryptsObjectTiers) {
  TempDir dir;
  StoreOptions o;
  o.tiers = {"mem://?capacity=64KiB&page=64", "objmem:///store-encrypted"};
  o.key_file = WriteKeyFile(dir.path(), 7);
  auto store = Store::Open(o);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  const auto keys = Keys(2);
  ASSERT_TRUE(Save(**store, keys).ok());
  ASSERT_TRUE((*store)->Flush().ok());
  auto fake = FakeStoreAt("/store-encrypted");
  const std::vector<std::byte> stored = fake->Bytes(object::ChunkObjectName("", ChunkId::Of(ns_, keys[0])));
  ASSERT_EQ(stored.size(), 4096 + bytes_);
  auto header = internal::DecodeChunkHeader(stored);
  ASSERT_TRUE(header.ok());
  EXPECT_TRUE(header->encrypted());
}

}  // namespace
}  // namespace kvtier::testing
