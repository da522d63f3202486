#include "link_watch.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <sstream>
#include <stdexcept>

namespace cohortrun {
namespace {

using std::chrono::milliseconds;

constexpr size_t kMostAddresses = 16;  // hosts with many interfaces (container bridges) advertise the first
constexpr size_t kLongestHello = 512;
constexpr char kVersion[] = "v1";

std::string system_error(const std::string& what) { return what + ": " + std::strerror(errno); }

std::string random_token() {
  unsigned char bytes[16];
  size_t got = 0;
  while (got < sizeof bytes) {
    const ssize_t n = getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw std::runtime_error(system_error("getrandom"));
    got += static_cast<size_t>(n);
  }
  static const char digits[] = "0123456789abcdef";
  std::string token;
  for (unsigned char b : bytes) {
    token += digits[b >> 4];
    token += digits[b & 15];
  }
  return token;
}

bool parse_positive(const std::string& word, int* value) {
  if (word.empty() || word.size() > 9 || word.find_first_not_of("0123456789") != std::string::npos) return false;
  *value = std::stoi(word);
  return *value > 0;
}

// "10.0.0.1:40000" or "[2001:db8::1]:40000" → host and port; false when malformed.
bool split_address(const std::string& address, std::string* host, std::string* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) return false;
  *host = address.substr(0, colon);
  *port = address.substr(colon + 1);
  if (host->front() == '[') {
    if (host->back() != ']') return false;
    *host = host->substr(1, host->size() - 2);
  }
  return !host->empty() && port->find_first_not_of("0123456789") == std::string::npos;
}

// The addresses of this host that other hosts may reach it by: every interface that is
// up, loopback and IPv6 link-local left out (a link-local address needs its interface
// named); loopback alone when there is nothing else.
std::vector<std::string> advertised_addresses(bool ipv6, int port) {
  std::vector<std::string> v4, v6;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) == 0) {
    for (ifaddrs* i = list; i; i = i->ifa_next) {
      if (!i->ifa_addr || !(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK)) continue;
      char text[INET6_ADDRSTRLEN] = {};
      if (i->ifa_addr->sa_family == AF_INET) {
        inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, text, sizeof text);
        v4.push_back(std::string(text) + ":" + std::to_string(port));
      } else if (ipv6 && i->ifa_addr->sa_family == AF_INET6) {
        const in6_addr& a = reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr;
        if (IN6_IS_ADDR_LINKLOCAL(&a)) continue;
        inet_ntop(AF_INET6, &a, text, sizeof text);
        v6.push_back("[" + std::string(text) + "]:" + std::to_string(port));
      }
    }
    freeifaddrs(list);
  }
  std::vector<std::string> all;
  for (const auto* group : {&v4, &v6})
    for (const std::string& a : *group)
      if (all.size() < kMostAddresses && std::find(all.begin(), all.end(), a) == all.end()) all.push_back(a);
  if (all.empty()) all.push_back("127.0.0.1:" + std::to_string(port));
  return all;
}

// A listening socket on every address: IPv6 taking IPv4 too where the host has IPv6,
// else IPv4. Sets *ipv6 to which.
int listen_anywhere(bool* ipv6) {
  int fd = socket(AF_INET6, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    const int off = 0;
    sockaddr_in6 any{};
    any.sin6_family = AF_INET6;
    any.sin6_addr = in6addr_any;
    if (setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off) == 0 &&
        bind(fd, reinterpret_cast<sockaddr*>(&any), sizeof any) == 0 && listen(fd, 512) == 0) {
      *ipv6 = true;
      return fd;
    }
    close(fd);
  }
  fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error(system_error("socket"));
  sockaddr_in any{};
  any.sin_family = AF_INET;
  any.sin_addr.s_addr = htonl(INADDR_ANY);
  if (bind(fd, reinterpret_cast<sockaddr*>(&any), sizeof any) != 0 || listen(fd, 512) != 0) {
    const std::string why = system_error("listening on a TCP port");
    close(fd);
    throw std::runtime_error(why);
  }
  *ipv6 = false;
  return fd;
}

int local_port(int fd) {
  sockaddr_storage address{};
  socklen_t size = sizeof address;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size) != 0)
    throw std::runtime_error(system_error("getsockname"));
  if (address.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&address)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in*>(&address)->sin_port);
}

// The peer's address as text, the key that keeps two hosts of the same name apart.
std::string peer_text(const sockaddr_storage& address) {
  char text[INET6_ADDRSTRLEN] = {};
  if (address.ss_family == AF_INET6) {
    const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(&address)->sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(&a))
      inet_ntop(AF_INET, &a.s6_addr[12], text, sizeof text);
    else
      inet_ntop(AF_INET6, &a, text, sizeof text);
  } else {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&address)->sin_addr, text, sizeof text);
  }
  return text;
}

}  // namespace

LinkWatch link_watch(int timeout_s) {
  LinkWatch w;
  w.timeout_s = timeout_s;
  w.idle_s = timeout_s / 3;
  w.interval_s = std::max(1, timeout_s / 10);
  w.probes = 3;
  return w;
}

std::string format_watch(const WatchSettings& settings) {
  std::string text = std::string(kVersion) + " " + settings.token + " " + std::to_string(settings.interval_ms) + " " +
                     std::to_string(settings.timeout_ms);
  for (const std::string& a : settings.addresses) text += " " + a;
  return text;
}

std::optional<WatchSettings> parse_watch(std::string_view text, std::string* error) {
  std::istringstream in{std::string(text)};
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  const auto bad = [&](const std::string& why) {
    *error = why + " (expected '" + kVersion + " TOKEN INTERVAL_MS TIMEOUT_MS ADDRESS:PORT...')";
    return std::nullopt;
  };
  if (words.size() < 5 || words[0] != kVersion) return bad("'" + std::string(text) + "' is not a watch setting");
  WatchSettings s;
  s.token = words[1];
  if (s.token.size() != 32 || s.token.find_first_not_of("0123456789abcdef") != std::string::npos)
    return bad("token '" + s.token + "' is not 32 hex digits");
  if (!parse_positive(words[2], &s.interval_ms)) return bad("interval '" + words[2] + "' is not a positive number");
  if (!parse_positive(words[3], &s.timeout_ms)) return bad("timeout '" + words[3] + "' is not a positive number");
  for (size_t i = 4; i < words.size(); ++i) {
    std::string host, port;
    if (!split_address(words[i], &host, &port)) return bad("address '" + words[i] + "' is not HOST:PORT");
    s.addresses.push_back(words[i]);
  }
  return s;
}

std::string ranks_text(const std::vector<int>& unsorted) {
  std::vector<int> ranks = unsorted;
  std::sort(ranks.begin(), ranks.end());
  if (ranks.empty()) return "no rank";
  if (ranks.size() == 1) return "rank " + std::to_string(ranks[0]);
  if (ranks.back() - ranks.front() + 1 == static_cast<int>(ranks.size()))
    return "ranks " + std::to_string(ranks.front()) + "-" + std::to_string(ranks.back());
  std::string text = "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) text += (i ? ", " : "") + std::to_string(ranks[i]);
  return text;
}

// --- cohortrun's side ---

WatchServer::WatchServer(int interval_ms, int silence_ms, int timeout_ms)
    : interval_(milliseconds(interval_ms)),
      silence_(milliseconds(silence_ms)),
      hello_limit_(milliseconds(std::max(5000, silence_ms))) {
  settings_.token = random_token();
  settings_.interval_ms = interval_ms;
  settings_.timeout_ms = timeout_ms;
  bool ipv6 = false;
  listen_fd_ = listen_anywhere(&ipv6);
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  try {
    if (epoll_fd_ < 0) throw std::runtime_error(system_error("epoll_create1"));
    listen_for_connections(true);
    settings_.addresses = advertised_addresses(ipv6, local_port(listen_fd_));
  } catch (const std::runtime_error&) {
    close(listen_fd_);
    if (epoll_fd_ >= 0) close(epoll_fd_);
    throw;
  }
}

void WatchServer::listen_for_connections(bool on) {
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.fd = listen_fd_;
  if (epoll_ctl(epoll_fd_, on ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, listen_fd_, &event) != 0)
    throw std::runtime_error(system_error("epoll_ctl"));
  accepting_ = on;
}

WatchServer::~WatchServer() {
  for (const auto& entry : connections_) close(entry.first);
  close(listen_fd_);
  close(epoll_fd_);
}

void WatchServer::service(WatchClock::time_point now) {
  // Not served for two intervals: cohortrun (with the whole job, as a scheduler suspends
  // it) was stopped, and so were the heartbeats. Their silence is not the link's.
  if (served_ != WatchClock::time_point{} && now - served_ > 2 * interval_)
    for (auto& entry : connections_) entry.second.heard = std::max(entry.second.heard, now);
  served_ = now;
  epoll_event events[64];
  int n;
  do {
    n = epoll_wait(epoll_fd_, events, 64, 0);
    for (int i = 0; i < n; ++i) {
      if (events[i].data.fd == listen_fd_)
        accept_all(now);
      else
        read_from(events[i].data.fd, now);
    }
  } while (n == 64);
  std::vector<int> late;  // connected, and no hello: not one of this job's monitors
  for (const auto& [fd, c] : connections_)
    if (!c.registered && now - c.since > hello_limit_) late.push_back(fd);
  for (int fd : late) drop(fd);
}

void WatchServer::accept_all(WatchClock::time_point now) {
  while (true) {
    sockaddr_storage peer{};
    socklen_t size = sizeof peer;
    const int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &size, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0 && (errno == EINTR || errno == ECONNABORTED || errno == EPROTO)) continue;
    if (fd < 0 && (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)) {
      // Out of descriptors: the listener would stay readable; wait for a connection to close.
      listen_for_connections(false);
      return;
    }
    if (fd < 0) return;  // EAGAIN
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.fd = fd;
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event) != 0) {
      close(fd);
      continue;
    }
    Connection& c = connections_[fd];
    c.since = c.heard = now;
    c.address = peer_text(peer);
  }
}

void WatchServer::read_from(int fd, WatchClock::time_point now) {
  const auto it = connections_.find(fd);
  if (it == connections_.end()) return;
  Connection& c = it->second;
  char buffer[1024];
  while (true) {
    const ssize_t n = read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) return drop(fd);  // the rank ended (or its monitor did): not a lost link
    c.heard = now;
    if (c.registered) continue;
    c.hello.append(buffer, static_cast<size_t>(n));
    const size_t end = c.hello.find('\n');
    if (end == std::string::npos) {
      if (c.hello.size() > kLongestHello) return drop(fd);
      continue;
    }
    // "TOKEN RANK HOST"; what follows the newline is heartbeats.
    std::istringstream in(c.hello.substr(0, end));
    std::string token, host;
    int rank = -1;
    if (!(in >> token >> rank >> host) || token != settings_.token || rank < 0) return drop(fd);
    c.registered = true;
    c.rank = rank;
    c.host = host;
    c.hello.clear();
  }
}

void WatchServer::drop(int fd) {
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  close(fd);
  connections_.erase(fd);
  if (!accepting_) listen_for_connections(true);
}

std::map<std::string, WatchServer::Heard> WatchServer::hosts_heard() const {
  std::map<std::string, Heard> hosts;
  for (const auto& entry : connections_) {
    const Connection& c = entry.second;
    if (!c.registered) continue;
    Heard& h = hosts.try_emplace(c.host, Heard{c.heard, {c.host, c.address, {}}}).first->second;
    h.latest = std::max(h.latest, c.heard);
    h.host.ranks.push_back(c.rank);
  }
  return hosts;
}

std::optional<LostHost> WatchServer::lost(WatchClock::time_point now) const {
  std::optional<Heard> oldest;
  for (const auto& [name, heard] : hosts_heard())
    if (now - heard.latest > silence_ && (!oldest || heard.latest < oldest->latest)) oldest = heard;
  if (!oldest) return std::nullopt;
  std::sort(oldest->host.ranks.begin(), oldest->host.ranks.end());
  return oldest->host;
}

WatchClock::time_point WatchServer::next_deadline() const {
  WatchClock::time_point next = WatchClock::time_point::max();
  // Served at least every interval, so that a longer gap means this process was stopped.
  for (const auto& [name, heard] : hosts_heard()) next = std::min({next, heard.latest + silence_, served_ + interval_});
  for (const auto& entry : connections_)
    if (!entry.second.registered) next = std::min(next, entry.second.since + hello_limit_);
  return next;
}

size_t WatchServer::registered() const {
  return static_cast<size_t>(
      std::count_if(connections_.begin(), connections_.end(), [](const auto& e) { return e.second.registered; }));
}

// --- the rank monitor's side ---

WatchClient::WatchClient(WatchSettings settings, int rank, std::string host, WatchClock::time_point now)
    : settings_(std::move(settings)) {
  hello_ = settings_.token + " " + std::to_string(rank) + " " + (host.empty() ? "?" : host) + "\n";
  // Long enough for a loaded network, never longer than the watch is meant to take.
  connect_until_ = now + milliseconds(std::clamp(settings_.timeout_ms, 2000, 10000));
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd_ < 0)
    fail(State::kUnreachable, system_error("epoll_create1"));
  else
    connect_all();
  if (state_ == State::kConnecting && connecting_.empty()) fail(State::kUnreachable, errors_text());
}

std::string WatchClient::errors_text() const {
  std::string text;
  for (const std::string& e : errors_) text += (text.empty() ? "" : "; ") + e;
  return text.empty() ? "no address to try" : text;
}

WatchClient::~WatchClient() {
  for (const auto& entry : connecting_) close(entry.first);
  if (socket_ >= 0) close(socket_);
  if (epoll_fd_ >= 0) close(epoll_fd_);
}

void WatchClient::connect_all() {
  for (const std::string& address : settings_.addresses) {
    std::string host, port;
    addrinfo hints{}, *found = nullptr;
    hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
    hints.ai_socktype = SOCK_STREAM;
    if (!split_address(address, &host, &port) || getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0) {
      errors_.push_back(address + ": not a numeric address");
      continue;
    }
    const int fd = socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    const bool started = fd >= 0 && (connect(fd, found->ai_addr, found->ai_addrlen) == 0 || errno == EINPROGRESS);
    const int error = errno;
    freeaddrinfo(found);
    epoll_event event{};
    event.events = EPOLLOUT;
    event.data.fd = fd;
    if (started && epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event) == 0) {
      connecting_[fd] = address;
      continue;
    }
    errors_.push_back(address + ": " + std::strerror(started ? errno : error));
    if (fd >= 0) close(fd);
  }
}

int WatchClient::timeout_ms(WatchClock::time_point now) const {
  const auto until = [now](WatchClock::time_point t) {
    return static_cast<int>(std::max<long>(0, std::chrono::duration_cast<milliseconds>(t - now).count()));
  };
  if (state_ == State::kConnecting) return std::min(100, until(connect_until_));
  if (state_ == State::kWatching) return until(next_beat_);
  return -1;
}

WatchClient::State WatchClient::service(WatchClock::time_point now) {
  if (state_ == State::kConnecting) finish_connecting(now);
  if (state_ == State::kWatching) beat(now);
  return state_;
}

void WatchClient::finish_connecting(WatchClock::time_point now) {
  epoll_event events[kMostAddresses];
  const int n = epoll_wait(epoll_fd_, events, static_cast<int>(kMostAddresses), 0);
  for (int i = 0; i < n && socket_ < 0; ++i) {
    const int fd = events[i].data.fd;
    int error = 0;
    socklen_t size = sizeof error;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size) != 0) error = errno;
    if (error == 0) {
      socket_ = fd;
      address_ = connecting_[fd];
    } else {
      errors_.push_back(connecting_[fd] + ": " + std::strerror(error));
      epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
      close(fd);
    }
    connecting_.erase(fd);
  }
  if (socket_ < 0) {
    if (connecting_.empty() || now >= connect_until_)
      fail(State::kUnreachable, connecting_.empty() ? errors_text() : "no answer within the connect limit");
    return;
  }
  for (const auto& entry : connecting_) close(entry.first);
  connecting_.clear();
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.fd = socket_;
  const unsigned int user_timeout = static_cast<unsigned int>(settings_.timeout_ms);
  const int one = 1;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, socket_, &event) != 0 ||
      setsockopt(socket_, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof user_timeout) != 0 ||
      setsockopt(socket_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0)
    return fail(State::kClosed, system_error(address_ + ": setting up the connection"));
  // A fresh connection's send buffer takes the short hello whole, or the connection failed.
  const ssize_t sent = send(socket_, hello_.data(), hello_.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  if (sent != static_cast<ssize_t>(hello_.size()))
    return fail(State::kClosed,
                address_ + ": sending the hello: " + (sent < 0 ? std::strerror(errno) : "only part of it was taken"));
  state_ = State::kWatching;
  next_beat_ = now + milliseconds(settings_.interval_ms);
}

void WatchClient::beat(WatchClock::time_point now) {
  const auto gone = [this](int error) {
    // The kernel gave up on unacknowledged heartbeats, or the network says the host is unreachable.
    if (error == ETIMEDOUT || error == EHOSTUNREACH || error == ENETUNREACH)
      fail(State::kLost, "no acknowledgement from cohortrun's host (" + address_ + ") within " +
                             std::to_string(settings_.timeout_ms / 1000) + " s: " + std::strerror(error));
    else
      fail(State::kClosed, address_ + ": " + std::strerror(error));
  };
  epoll_event event{};
  if (epoll_wait(epoll_fd_, &event, 1, 0) == 1) {
    char buffer[64];
    const ssize_t n = recv(socket_, buffer, sizeof buffer, MSG_DONTWAIT);
    if (n == 0) return fail(State::kClosed, address_ + ": cohortrun closed the connection");
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return gone(errno);
  }
  if (now < next_beat_) return;
  const char byte = '.';
  if (send(socket_, &byte, 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
      errno != EINTR)
    return gone(errno);
  next_beat_ = now + milliseconds(settings_.interval_ms);
}

void WatchClient::fail(State state, const std::string& why) {
  state_ = state;
  why_ = why;
  for (const auto& entry : connecting_) close(entry.first);
  connecting_.clear();
  if (socket_ >= 0) close(socket_);
  socket_ = -1;
}

}  // namespace cohortrun
