// cohortrun's own watch over the links to the ranks' hosts, for --link-timeout S.
//
// mpirun learns that a host is gone from TCP keepalive on its connections to its
// daemons, and keepalive says nothing while mpirun has a message in flight on that
// connection: the kernel then retries the message for up to ~15 minutes
// (net.ipv4.tcp_retries2), and the job waits that long. The watch does not depend on
// mpirun's connections: each rank's monitor (rank_monitor.h) connects to cohortrun and
// writes a byte every interval. A connection that falls silent without being closed is
// a host cohortrun no longer hears from, and cohortrun ends the job (job.h). A rank
// that ends closes its connection (its process's exit does), which is never a loss.
//
// On the rank's side, a heartbeat that stays unacknowledged for S (TCP_USER_TIMEOUT)
// means cohortrun's host is out of reach: the monitor stops its rank, so that a host
// cut off from the job does not go on training alone.
//
// Only monitors given COHORTRUN_LINK_WATCH (by cohortrun, through mpirun's -x) take
// part; a rank that cannot reach cohortrun (a firewall) is left to mpirun's keepalive.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cohortrun {

using WatchClock = std::chrono::steady_clock;

// The timing of --link-timeout S. mpirun's connections to its daemons get TCP keepalive:
// probes after `idle_s` quiet seconds, `probes` of them `interval_s` apart, so that
// mpirun reports the host lost at most detect_s() (about 2/3 of S) after its link went;
// mpirun then has end_s() (the rest of S) to end the job before cohortrun stops it.
// cohortrun's own watch hears a heartbeat every interval_s and calls a host lost after
// silence_s() without one (one interval after mpirun would have), then gives mpirun
// the rest of S to end the job.
struct LinkWatch {
  int idle_s = 0, interval_s = 0, probes = 0;
  int timeout_s = 0;
  int detect_s() const { return idle_s + interval_s * probes; }
  int end_s() const { return timeout_s - detect_s(); }
  int silence_s() const { return detect_s() + interval_s; }
};
LinkWatch link_watch(int timeout_s);

// The variable that tells a rank's monitor where cohortrun listens.
inline constexpr const char* kLinkWatchVariable = "COHORTRUN_LINK_WATCH";

// What a monitor needs: "v1 TOKEN INTERVAL_MS TIMEOUT_MS ADDRESS:PORT…" in the variable.
struct WatchSettings {
  std::string token;                   // 32 hex digits, so that only this job's ranks count
  int interval_ms = 1000;              // between heartbeats
  int timeout_ms = 10000;              // a heartbeat unacknowledged this long stops the rank
  std::vector<std::string> addresses;  // "10.0.0.1:40000", "[2001:db8::1]:40000"
};
std::string format_watch(const WatchSettings& settings);
// nullopt, with the reason in *error, for text that is not format_watch's.
std::optional<WatchSettings> parse_watch(std::string_view text, std::string* error);

// A host that fell silent: the name its ranks' monitors gave (their gethostname), the
// address a connection from there came from, and the ranks heard from there, in order.
// Hosts are told apart by name (as mpirun tells them apart).
struct LostHost {
  std::string host;
  std::string address;
  std::vector<int> ranks;
};

// "rank 3", "ranks 2-3", "ranks 1, 4, 6".
std::string ranks_text(const std::vector<int>& ranks);

// cohortrun's side: listens on every address of this host (an ephemeral port) and keeps
// track of each rank that says hello. Single-threaded: the owner polls fd() and calls
// service() when it is readable, and before it asks lost().
class WatchServer {
 public:
  // Throws std::runtime_error when it cannot listen.
  WatchServer(int interval_ms, int silence_ms, int timeout_ms);
  ~WatchServer();
  WatchServer(const WatchServer&) = delete;
  WatchServer& operator=(const WatchServer&) = delete;

  // The value of kLinkWatchVariable for the ranks.
  std::string settings_text() const { return format_watch(settings_); }
  // One descriptor (an epoll set) that is readable when a connection or a byte arrives.
  int fd() const { return epoll_fd_; }
  // Accepts and reads whatever has arrived; never blocks.
  void service(WatchClock::time_point now);
  // The first host whose ranks have all been silent for longer than the silence limit
  // (nullopt while every host is heard from). A gap of two intervals between service()
  // calls (cohortrun stopped with the job) is forgiven.
  std::optional<LostHost> lost(WatchClock::time_point now) const;
  // When service() and lost() are next due: at the latest one interval after the last
  // service() (time_point::max(): no rank registered).
  WatchClock::time_point next_deadline() const;
  // The ranks that said hello and have not closed their connection.
  size_t registered() const;

 private:
  struct Connection {
    std::string hello;  // what arrived before the newline
    bool registered = false;
    int rank = -1;
    std::string host;     // as the hello names it
    std::string address;  // the peer's
    WatchClock::time_point since, heard;
  };
  struct Heard {
    WatchClock::time_point latest;  // the host's latest heartbeat
    LostHost host;
  };
  void listen_for_connections(bool on);
  void accept_all(WatchClock::time_point now);
  void read_from(int fd, WatchClock::time_point now);
  void drop(int fd);
  std::map<std::string, Heard> hosts_heard() const;  // by host name

  WatchSettings settings_;
  WatchClock::duration interval_, silence_, hello_limit_;
  int listen_fd_ = -1, epoll_fd_ = -1;
  bool accepting_ = false;  // the listener is in the epoll set (not while out of descriptors)
  WatchClock::time_point served_{};
  std::map<int, Connection> connections_;
};

// The monitor's side: connects to every address at once, keeps the first that answers,
// says hello and beats. The owner calls service() whenever timeout_ms() has passed.
class WatchClient {
 public:
  enum class State {
    kConnecting,
    kWatching,     // connected, beating
    kClosed,       // cohortrun closed the connection (the job ended) or refused it: no watch
    kUnreachable,  // no address answered: no watch
    kLost,         // heartbeats unacknowledged for the timeout: cohortrun's host is out of reach
  };
  WatchClient(WatchSettings settings, int rank, std::string host, WatchClock::time_point now);
  ~WatchClient();
  WatchClient(const WatchClient&) = delete;
  WatchClient& operator=(const WatchClient&) = delete;

  // Milliseconds until service() has something to do (-1: nothing, ever); at most 100
  // while connecting.
  int timeout_ms(WatchClock::time_point now) const;
  State service(WatchClock::time_point now);
  State state() const { return state_; }
  // Why the state is what it is, for kUnreachable and kLost.
  const std::string& why() const { return why_; }

 private:
  void connect_all();
  void finish_connecting(WatchClock::time_point now);
  void beat(WatchClock::time_point now);
  void fail(State state, const std::string& why);
  std::string errors_text() const;  // each address that failed, with why

  WatchSettings settings_;
  std::string hello_;
  int epoll_fd_ = -1, socket_ = -1;
  std::string address_;                    // socket_'s
  std::map<int, std::string> connecting_;  // descriptor → address
  std::vector<std::string> errors_;
  State state_ = State::kConnecting;
  std::string why_;
  WatchClock::time_point connect_until_, next_beat_;
};

}  // namespace cohortrun
