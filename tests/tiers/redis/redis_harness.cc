#include "redis_harness.h"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>
#include <unistd.h>

namespace kvtier::redis::testing {
namespace {

Result<std::string> RunScript(const std::string& env, const std::string& args) {
  const std::string cmd = env + " bash " + KVTIER_REDIS_SCRIPT + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return Status::IOError("popen failed");
  std::string out;
  char buf[4096];
  size_t n = 0;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int rc = pclose(p);
  if (rc != 0) return Status::IOError("redis-cluster.sh " + args + " failed: " + out);
  return out;
}

}  // namespace

std::string SkipReason() {
  if (access("/usr/bin/redis-server", X_OK) == 0 || std::system("command -v redis-server >/dev/null 2>&1") == 0) {
    return "";
  }
  return "redis-server is not installed (scripts/install-deps.sh installs it)";
}

Result<std::unique_ptr<LocalRedis>> LocalRedis::Start(int masters, int replicas,
                                                      const std::map<std::string, std::string>& env) {
  auto r = std::unique_ptr<LocalRedis>(new LocalRedis());
  char tmpl[] = "/tmp/kvtier-redis-test.XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return Status::IOError("mkdtemp failed");
  r->dir_ = tmpl;
  for (const auto& [k, v] : env) r->env_ += k + "='" + v + "' ";
  const auto t0 = std::chrono::steady_clock::now();
  KVTIER_ASSIGN_OR_RETURN(std::string out, RunScript(r->env_, "start " + r->dir_ + " " + std::to_string(masters) +
                                                                  " " + std::to_string(replicas)));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    if (!line.empty()) r->url_ = line;
  }
  std::cout << "[redis] " << masters << " master(s) x " << replicas << " replica(s) started in " << secs
            << " s: " << r->url_ << std::endl;
  if (r->url_.rfind("redis://", 0) != 0) return Status::IOError("no URL from redis-cluster.sh: " + out);
  auto nodes = ParseNodeList(r->url_.substr(8));
  KVTIER_RETURN_IF_ERROR(nodes.status());
  for (const auto& n : *nodes) r->ports_.push_back(n.port);
  return r;
}

LocalRedis::~LocalRedis() {
  if (dir_.empty()) return;
  (void)RunScript(env_, "stop " + dir_);
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

std::string LocalRedis::password() const {
  const size_t p = env_.find("KVTIER_REDIS_PASSWORD='");
  if (p == std::string::npos) return "";
  const size_t b = p + 23;
  return env_.substr(b, env_.find('\'', b) - b);
}

Result<ReplyNode> LocalRedis::Command(int port, const std::vector<std::string>& argv) const {
  ConnOptions o;
  o.password = password();
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<Conn> c, Conn::Open(NodeAddr{"127.0.0.1", port}, o));
  std::vector<std::string_view> args(argv.begin(), argv.end());
  KVTIER_ASSIGN_OR_RETURN(ReplyPtr r, c->Command(args));
  return ToReplyNode(r.get());
}

int LocalRedis::Pid(int port) const {
  std::ifstream in(dir_ + "/" + std::to_string(port) + "/redis.pid");
  int pid = 0;
  in >> pid;
  return pid;
}

void LocalRedis::Kill(int port) {
  const int pid = Pid(port);
  if (pid <= 0) return;
  ::kill(pid, SIGKILL);
  for (int i = 0; i < 500 && ::kill(pid, 0) == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

Status LocalRedis::Restart(int port) {
  const std::string d = dir_ + "/" + std::to_string(port);
  const std::string cmd = "cd " + d + " && redis-server " + d + "/redis.conf >/dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) return Status::IOError("restart of redis on " + std::to_string(port) + " failed");
  for (int i = 0; i < 400; ++i) {
    auto r = Command(port, {"PING"});
    if (r.ok() && r->type == ReplyNode::Type::kStatus) return Status::OK();
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  return Status::IOError("redis on " + std::to_string(port) + " did not answer after a restart");
}

bool LocalRedis::WaitClusterOk(int timeout_s) const {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    bool ok = true;
    for (int p : ports_) {
      auto r = Command(p, {"CLUSTER", "INFO"});
      if (!r.ok()) continue;  // a node that is down
      ok = ok && r->str.find("cluster_state:ok") != std::string::npos;
    }
    if (ok) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

bool LocalRedis::WaitReplicasListed(int ask_port, size_t replicas, int timeout_s) const {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    auto r = Command(ask_port, {"CLUSTER", "SLOTS"});
    if (r.ok()) {
      auto m = SlotMap::FromClusterSlots(*r, NodeAddr{"127.0.0.1", ask_port});
      bool all = m.ok() && !m->shards().empty();
      for (size_t i = 0; all && i < m->shards().size(); ++i) all = m->shards()[i].replicas.size() >= replicas;
      if (all) return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

int LocalRedis::MasterOf(int slot, int ask_port) const {
  auto r = Command(ask_port, {"CLUSTER", "SLOTS"});
  if (!r.ok()) return 0;
  auto m = SlotMap::FromClusterSlots(*r, NodeAddr{"127.0.0.1", ask_port});
  if (!m.ok() || m->ShardFor(slot) == nullptr) return 0;
  return m->ShardFor(slot)->master.port;
}

std::vector<std::byte> Pattern(size_t size, uint64_t seed) {
  std::vector<std::byte> out(size);
  uint64_t x = seed * 0x9E3779B97F4A7C15ULL + 1;
  for (size_t i = 0; i < size; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    for (size_t j = 0; j < 8 && i + j < size; ++j) out[i + j] = static_cast<std::byte>(x >> (8 * j));
  }
  return out;
}

Status PutOne(object::ObjectClient& c, const std::string& name, const std::vector<std::byte>& data) {
  const std::span<const std::byte> piece(data);
  object::ObjectWrite w{name, GatherList(&piece, 1), {}};
  c.PutMany(std::span(&w, 1));
  return w.status;
}

}  // namespace kvtier::redis::testing
