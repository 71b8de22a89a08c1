#include "tiers/rados/rados_conn.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>

#include "core/input_file.h"
#include "tiers/rados/rados_client.h"

namespace kvtier::rados {
namespace {

std::string Seconds(std::chrono::milliseconds ms) {
  // librados takes whole seconds; never 0 (that would mean "wait forever").
  return std::to_string(std::max<int64_t>(1, (ms.count() + 999) / 1000));
}

}  // namespace

Status RadosStatus(int ret, std::string_view context) {
  if (ret >= 0) return Status::OK();
  return Status::FromErrno(-ret, "rados: " + std::string(context));
}

int WaitAndRelease(rados_completion_t c) {
  rados_aio_wait_for_complete(c);
  const int r = rados_aio_get_return_value(c);
  rados_aio_release(c);
  return r;
}

Result<std::unique_ptr<RadosConn>> RadosConn::Open(const RadosOptions& o) {
  auto conn = std::unique_ptr<RadosConn>(new RadosConn());
  const std::string who = "client." + o.user;
  const std::string where = o.conf.empty() ? std::string("the default ceph.conf") : "conf " + o.conf;
  // librados reads these itself: check them first with the one opener (a FIFO would hang it, a link
  // or an open keyring is refused as key_file= refuses them).
  if (!o.conf.empty()) {
    KVTIER_ASSIGN_OR_RETURN(const int fd, internal::OpenUserFile(o.conf, 4ull << 20, "rados: conf", /*secret=*/false));
    ::close(fd);
  }
  if (!o.keyring.empty()) {
    KVTIER_ASSIGN_OR_RETURN(const int fd, internal::OpenUserFile(o.keyring, internal::kMaxSecretFileBytes,
                                                                 "rados: keyring", /*secret=*/true));
    ::close(fd);
  }
  KVTIER_RETURN_IF_ERROR(RadosStatus(rados_create2(&conn->cluster_, o.cluster.c_str(), who.c_str(), 0),
                                     "create a handle for " + who));
  KVTIER_RETURN_IF_ERROR(RadosStatus(rados_conf_read_file(conn->cluster_, o.conf.empty() ? nullptr : o.conf.c_str()),
                                     "read " + where));
  if (!o.keyring.empty()) {
    KVTIER_RETURN_IF_ERROR(RadosStatus(rados_conf_set(conn->cluster_, "keyring", o.keyring.c_str()), "keyring="));
  }
  const std::string op = Seconds(o.timeout), mount = Seconds(o.connect_timeout);
  for (const auto& [name, value] : {std::pair{"rados_osd_op_timeout", op}, std::pair{"rados_mon_op_timeout", op},
                                    std::pair{"client_mount_timeout", mount}}) {
    KVTIER_RETURN_IF_ERROR(RadosStatus(rados_conf_set(conn->cluster_, name, value.c_str()), name));
  }
  const int r = rados_connect(conn->cluster_);
  if (r == -EACCES || r == -EPERM || r == -EKEYREJECTED) {
    return Status::InvalidArgument("rados: the cluster of " + where + " refused " + who +
                                   " (wrong or missing key: check keyring= and user=)");
  }
  if (r == -ETIMEDOUT || r == -ENOTCONN || r == -ECONNREFUSED) {
    return Status::IOError("rados: no monitor of " + where + " answered within " + mount + " s", true);
  }
  KVTIER_RETURN_IF_ERROR(RadosStatus(r, "connect as " + who + " with " + where));
  const int p = rados_ioctx_create(conn->cluster_, o.pool.c_str(), &conn->io_);
  if (p == -ENOENT) return Status::InvalidArgument("rados: no pool '" + o.pool + "' in the cluster of " + where);
  KVTIER_RETURN_IF_ERROR(RadosStatus(p, "open pool " + o.pool));
  rados_ioctx_set_namespace(conn->io_, o.ns.empty() ? nullptr : o.ns.c_str());
  return conn;
}

RadosConn::~RadosConn() {
  if (io_ != nullptr) {
    rados_aio_flush(io_);  // no completion may outlive the context
    rados_ioctx_destroy(io_);
  }
  if (cluster_ != nullptr) rados_shutdown(cluster_);
}

}  // namespace kvtier::rados
