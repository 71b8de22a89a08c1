// `kvtier serve --target URL [--target URL ...] [--listen 127.0.0.1:9400] [--tls-cert F --tls-key F]
//               [--token-file F] [--events tcp://127.0.0.1:5557] [--key-file F]`:
// an HTTP endpoint for routers and dashboards over a Store of the targets, opened only to look
// (docs/serve.md): GET /metrics, /healthz, /readyz, /v1/namespaces and POST /v1/lookup. Listening on
// an address other than loopback needs TLS and a bearer token; it is refused otherwise. With --events
// the Store's chunk events are published on ZeroMQ. Prints "kvtier serve: listening on URL" once the
// socket is bound (with --listen HOST:0, the port the system chose), and stops on SIGINT or SIGTERM.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <iostream>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "core/input_file.h"
#include "core/threads.h"
#include "kvtier/events.h"
#include "kvtier/store.h"
#include "tools/cli_numbers.h"
#include "tools/command.h"
#include "tools/serve/http_server.h"

namespace kvtier::tools {
namespace {

struct ServeArgs {
  std::vector<std::string> targets;
  std::string listen = "127.0.0.1:9400";
  std::string tls_cert, tls_key, token_file, events, events_topic = "kvtier", key_file;
  unsigned threads = 4;
  unsigned max_connections = 512;
  int idle_timeout_s = 15, request_timeout_s = 10;
  uint64_t max_body = 1 << 20;
  bool events_allow_remote = false;
};

struct Address {
  std::string host;
  int port = 0;
};

// "HOST:PORT" or "[V6]:PORT", port 0 to 65535.
Result<Address> ParseListen(const std::string& text) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) return Status::InvalidArgument("--listen wants HOST:PORT, got '" + text + "'");
  std::string host = text.substr(0, colon);
  if (host.front() == '[') {
    if (host.back() != ']') return Status::InvalidArgument("--listen: unbalanced [ in '" + text + "'");
    host = host.substr(1, host.size() - 2);
  }
  const auto port = ParseWholeNumber(text.substr(colon + 1), 0, 65535);
  if (!port || host.empty()) return Status::InvalidArgument("--listen wants HOST:PORT with a port from 0 to 65535, got '" + text + "'");
  return Address{host, static_cast<int>(*port)};
}

bool IsLoopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

Result<std::string> ReadToken(const std::string& path) {
  KVTIER_ASSIGN_OR_RETURN(std::string token, internal::ReadSecretFile(path, "bearer token"));
  while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) token.pop_back();
  if (token.empty()) return Status::InvalidArgument("--token-file " + path + " is empty");
  for (char c : token) {
    if (c < 0x21 || c > 0x7e) return Status::InvalidArgument("--token-file " + path + " holds a character a header cannot carry");
  }
  return token;
}

// HttpOptions from the arguments; InvalidArgument for an exposed listener without TLS and a token.
Result<HttpOptions> MakeHttpOptions(const ServeArgs& a) {
  KVTIER_ASSIGN_OR_RETURN(Address addr, ParseListen(a.listen));
  HttpOptions o;
  o.host = addr.host;
  o.port = addr.port;
  if (!IsLoopback(addr.host) && (a.tls_cert.empty() || a.tls_key.empty() || a.token_file.empty())) {
    return Status::InvalidArgument("--listen " + a.listen +
                                   " is not a loopback address: it needs --tls-cert, --tls-key and --token-file");
  }
  o.tls_cert = a.tls_cert;
  o.tls_key = a.tls_key;
  if (!a.token_file.empty()) {
    KVTIER_ASSIGN_OR_RETURN(o.token, ReadToken(a.token_file));
  }
  o.threads = a.threads;
  o.max_connections = a.max_connections;
  o.idle_timeout_s = a.idle_timeout_s;
  o.request_timeout_s = a.request_timeout_s;
  o.max_body_bytes = a.max_body;
  return o;
}

Result<std::unique_ptr<Store>> OpenStore(const ServeArgs& a, std::shared_ptr<EventPublisher>* publisher) {
  StoreOptions opt;
  opt.tiers = a.targets;
  opt.read_only = true;  // serving looks: nothing in the pool changes
  opt.key_file = a.key_file;
  opt.background_threads = 1;
  if (!a.events.empty()) {
    EventPublisherOptions ev;
    ev.endpoint = a.events;
    ev.topic = a.events_topic;
    ev.allow_remote = a.events_allow_remote;
    KVTIER_ASSIGN_OR_RETURN(*publisher, EventPublisher::Open(ev));
    opt.observer = *publisher;
  }
  return Store::Open(opt);
}

// SIGINT and SIGTERM write one byte here (the handler does nothing else: write is async-signal-safe),
// whichever thread the kernel picks to take them; the waiter thread reads it and stops the server.
int g_stop_pipe[2] = {-1, -1};

extern "C" void OnStopSignal(int) {
  const char c = 's';
  const ssize_t r = ::write(g_stop_pipe[1], &c, 1);
  (void)r;
}

bool CatchStopSignals() {
  if (::pipe2(g_stop_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return false;
  struct sigaction sa {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  return ::sigaction(SIGINT, &sa, nullptr) == 0 && ::sigaction(SIGTERM, &sa, nullptr) == 0 &&
         ::signal(SIGPIPE, SIG_IGN) != SIG_ERR;
}

// Stops the server once a stop signal came; returns then, or when `done`.
void WaitForSignal(HttpServer* server, const std::atomic<bool>* done) {
  pollfd p{g_stop_pipe[0], POLLIN, 0};
  while (!done->load()) {
    if (::poll(&p, 1, 200) > 0) {
      server->Stop();
      return;
    }
  }
}

int RunServe(const ServeArgs& a) {
  if (!CatchStopSignals()) {
    std::cerr << "kvtier serve: cannot install the SIGINT/SIGTERM handlers\n";
    return 1;
  }
  auto http = MakeHttpOptions(a);
  if (!http.ok()) {
    std::cerr << "kvtier serve: " << http.status().message() << "\n";
    return 2;
  }
  std::shared_ptr<EventPublisher> publisher;
  auto store = OpenStore(a, &publisher);
  if (!store.ok()) {
    std::cerr << "kvtier serve: " << store.status().ToString() << "\n";
    return 2;
  }
  ServeApi api(**store, ServeLimits{});
  auto server = HttpServer::Make(*http, api);
  if (!server.ok()) {
    std::cerr << "kvtier serve: " << server.status().message() << "\n";
    return 2;
  }
  auto port = (*server)->Bind();
  if (!port.ok()) {
    std::cerr << "kvtier serve: " << port.status().message() << "\n";
    return 1;
  }
  const bool v6 = http->host.find(':') != std::string::npos;
  std::cout << "kvtier serve: listening on " << (http->tls_cert.empty() ? "http" : "https") << "://"
            << (v6 ? "[" + http->host + "]" : http->host) << ":" << *port;
  if (publisher) std::cout << "; events on " << publisher->endpoint();
  std::cout << std::endl;
  std::atomic<bool> done{false};
  std::vector<std::thread> waiter;
  HttpServer* srv = server->get();
  const Status started = internal::StartThreads(&waiter, 1, [srv, &done] { WaitForSignal(srv, &done); }, "kvtier serve's signal waiter");
  const Status served = started.ok() ? (*server)->Run() : started;
  done.store(true);
  for (auto& t : waiter) t.join();
  if (!served.ok()) {
    std::cerr << "kvtier serve: " << served.message() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace

KVTIER_COMMAND("", "serve", "Serve /metrics, /healthz, /readyz, /v1/namespaces and /v1/lookup over HTTP for a Store of the targets (read-only)",
               [](CLI::App& cmd) -> std::function<int()> {
                 auto a = std::make_shared<ServeArgs>();
                 cmd.add_option("--target", a->targets, "tier URL, fastest first (repeat for a stack)")->required();
                 cmd.add_option("--listen", a->listen, "HOST:PORT to listen on (port 0: any free port)")
                     ->capture_default_str();
                 cmd.add_option("--tls-cert", a->tls_cert, "PEM certificate: serve HTTPS");
                 cmd.add_option("--tls-key", a->tls_key, "PEM private key of --tls-cert (absolute path, owner-only)");
                 cmd.add_option("--token-file", a->token_file,
                                "file holding the bearer token every request but /healthz and /readyz must carry "
                                "(absolute path, owner-only)");
                 cmd.add_option("--events", a->events,
                                "ZeroMQ endpoint to publish the Store's chunk events on, e.g. tcp://127.0.0.1:5557");
                 cmd.add_flag("--events-allow-remote", a->events_allow_remote,
                              "let --events bind a non-loopback tcp:// address (the event socket has no "
                              "authentication)");
                 cmd.add_option("--events-topic", a->events_topic, "first frame of every event message")
                     ->capture_default_str();
                 cmd.add_option("--key-file", a->key_file, "key of encrypted tiers (as StoreOptions::key_file)");
                 cmd.add_option("--threads", a->threads, "requests that touch the tiers, answered at once")
                     ->check(WholeNumber(1, 256))
                     ->capture_default_str();
                 cmd.add_option("--max-connections", a->max_connections,
                                "connections open at once; one more is answered 503 and closed")
                     ->check(WholeNumber(1, 65536))
                     ->capture_default_str();
                 cmd.add_option("--idle-timeout", a->idle_timeout_s,
                                "seconds a connection may wait before sending a request")
                     ->check(WholeNumber(1, 3600))
                     ->capture_default_str();
                 cmd.add_option("--request-timeout", a->request_timeout_s,
                                "seconds a request (head and body) may take to arrive once begun")
                     ->check(WholeNumber(1, 3600))
                     ->capture_default_str();
                 return [a] { return RunServe(*a); };
               });

}  // namespace kvtier::tools
