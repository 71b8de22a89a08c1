// RadosClient: the ObjectClient of rados:// tiers, over Ceph's native object store through Debian's
// librados (C API).
//
//   rados://POOL[/NAMESPACE]?conf=/etc/ceph/ceph.conf&user=admin&keyring=FILE&cluster=ceph
//       &timeout_ms=30000&connect_timeout_ms=10000
//
// One chunk is one RADOS object in POOL, in the RADOS namespace NAMESPACE (none by default), named by
// object/object_names.h. Reads and writes of a batch are issued together as librados asynchronous
// operations and then awaited, so the OSDs see the whole batch at once (ObjectTier bounds its bytes):
// a read is one compound operation (a stat, then one read per destination piece: the tier's header buffer
// and the caller's pieces, so the payload lands in place (ScatterReads), verified from the completion's
// callback while the batch's other objects arrive), a write one compound
// write_full + appends of the gather pieces (no copy, atomic: a reader sees the old object or the new).
// Credentials come from the keyring file named by keyring= or by the conf, never from the URL.
// Timeouts: timeout_ms= bounds every OSD and monitor operation (librados' rados_osd_op_timeout, default
// 30 s here: librados' own default waits forever for an OSD that is down), connect_timeout_ms= the
// connection to the monitors (default 10 s). Thread-safe (librados' io context is).
// Errors: librados' negative errno values are mapped by Status::FromErrno (ENOENT a miss, ENOSPC and
// EDQUOT NoSpace, ETIMEDOUT retryable); a refused authentication is one InvalidArgument naming the user.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/tier.h"
#include "tiers/object/object_client.h"

namespace kvtier::rados {

struct RadosOptions {
  std::string pool;
  std::string ns;                   // RADOS namespace; empty: the default one
  std::string conf;                 // ceph.conf path; empty: librados' search (CEPH_CONF, /etc/ceph)
  std::string user = "admin";       // the client id (client.<user>)
  std::string keyring;              // empty: what the conf names
  std::string cluster = "ceph";
  std::chrono::milliseconds timeout{30000};
  std::chrono::milliseconds connect_timeout{10000};
  bool read_only = false;           // PutMany and Delete fail with NotSupported
};

// The URL options this client owns (object::OptionNames turns them into ObjectTierFactory's list).
inline constexpr std::string_view kRadosUrlOptions[] = {"conf", "user", "keyring", "cluster"};

// Parses a rados:// URL. InvalidArgument on a missing pool, a malformed option or a secret in the URL.
Result<RadosOptions> ParseRadosOptions(const TierUrl& url);

// Connects and opens the pool's io context: InvalidArgument when authentication is refused or the pool
// does not exist, IOError (retryable) when no monitor answers in time.
Result<std::unique_ptr<object::ObjectClient>> OpenRadosClient(const RadosOptions& options);
// The object::ObjectClientFactory of rados:// (timeouts and read_only from ObjectTier's shared options).
Result<std::unique_ptr<object::ObjectClient>> OpenRadosObjectClient(const TierUrl& url,
                                                                    const object::ObjectClientOptions& options);

}  // namespace kvtier::rados
