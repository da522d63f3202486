// cohortrun's own watch over the links to the ranks' hosts: its settings' text, and a
// server and clients over this machine's addresses (short intervals, real sockets).
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <thread>

#include "link_watch.h"

namespace cohortrun {
namespace {

using State = WatchClient::State;
using std::chrono::milliseconds;

constexpr int kInterval = 20, kSilence = 500, kTimeout = 2000;

// Serves the server and the clients until `done` holds or 5 s pass; false on the timeout.
bool serve_until(WatchServer& server, const std::vector<WatchClient*>& clients, const std::function<bool()>& done) {
  const auto until = WatchClock::now() + std::chrono::seconds(5);
  while (WatchClock::now() < until) {
    const auto now = WatchClock::now();
    server.service(now);
    for (WatchClient* c : clients) c->service(now);
    if (done()) return true;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return false;
}

WatchSettings settings_of(const WatchServer& server) {
  std::string error;
  const std::optional<WatchSettings> s = parse_watch(server.settings_text(), &error);
  EXPECT_TRUE(s) << error;
  return s.value_or(WatchSettings{});
}

TEST(LinkWatch, SettingsTextRoundTripsAndBadTextIsNamed) {
  WatchSettings s;
  s.token = "0123456789abcdef0123456789abcdef";
  s.interval_ms = 3000;
  s.timeout_ms = 30000;
  s.addresses = {"10.0.0.1:40000", "[2001:db8::1]:40000"};
  const std::string text = format_watch(s);
  EXPECT_EQ(text, "v1 0123456789abcdef0123456789abcdef 3000 30000 10.0.0.1:40000 [2001:db8::1]:40000");
  std::string error;
  const std::optional<WatchSettings> back = parse_watch(text, &error);
  ASSERT_TRUE(back) << error;
  EXPECT_EQ(back->token, s.token);
  EXPECT_EQ(back->interval_ms, 3000);
  EXPECT_EQ(back->timeout_ms, 30000);
  EXPECT_EQ(back->addresses, s.addresses);

  for (const auto& [bad, named] : std::vector<std::pair<std::string, std::string>>{
           {"", "is not a watch setting"},
           {"v2 0123456789abcdef0123456789abcdef 1 1 a:1", "is not a watch setting"},
           {"v1 0123 1000 10000 10.0.0.1:1", "token '0123' is not 32 hex digits"},
           {"v1 0123456789abcdef0123456789abcdef 0 10000 10.0.0.1:1", "interval '0'"},
           {"v1 0123456789abcdef0123456789abcdef 1000 ten 10.0.0.1:1", "timeout 'ten'"},
           {"v1 0123456789abcdef0123456789abcdef 1000 10000 10.0.0.1", "address '10.0.0.1' is not HOST:PORT"},
           {"v1 0123456789abcdef0123456789abcdef 1000 10000 [::1:5", "address '[::1:5' is not HOST:PORT"}}) {
    error.clear();
    EXPECT_FALSE(parse_watch(bad, &error)) << bad;
    EXPECT_NE(error.find(named), std::string::npos) << error;
    EXPECT_NE(error.find("expected 'v1 TOKEN"), std::string::npos) << error;
  }
}

TEST(LinkWatch, RanksTextIsARangeWhereItCanBe) {
  EXPECT_EQ(ranks_text({3}), "rank 3");
  EXPECT_EQ(ranks_text({3, 2}), "ranks 2-3");
  EXPECT_EQ(ranks_text({4, 5, 6, 7}), "ranks 4-7");
  EXPECT_EQ(ranks_text({6, 1, 4}), "ranks 1, 4, 6");
}

TEST(LinkWatch, AHostThatFallsSilentIsLostWithItsRanks) {
  WatchServer server(kInterval, kSilence, kTimeout);
  const WatchSettings settings = settings_of(server);
  EXPECT_FALSE(settings.addresses.empty());
  EXPECT_EQ(settings.interval_ms, kInterval);
  EXPECT_EQ(settings.timeout_ms, kTimeout);
  WatchClient a(settings, 2, "h2", WatchClock::now()), b(settings, 3, "h2", WatchClock::now()),
      c(settings, 0, "h1", WatchClock::now());
  ASSERT_TRUE(serve_until(server, {&a, &b, &c}, [&] { return server.registered() == 3; }))
      << "registered " << server.registered();
  for (WatchClient* client : {&a, &b, &c}) EXPECT_EQ(client->state(), State::kWatching);
  EXPECT_NE(server.next_deadline(), WatchClock::time_point::max());

  // Beating: nobody is lost, however long it goes on.
  const auto beat_until = WatchClock::now() + milliseconds(2 * kSilence);
  serve_until(server, {&a, &b, &c}, [&] { return WatchClock::now() > beat_until; });
  EXPECT_FALSE(server.lost(WatchClock::now()));

  // h2's two ranks stop beating without closing (as behind a link that is down).
  const auto silent_from = WatchClock::now();
  EXPECT_FALSE(server.lost(silent_from));
  ASSERT_TRUE(serve_until(server, {&c}, [&] { return server.lost(WatchClock::now()).has_value(); }));
  // Their last beat came at most an interval (and a serving pass) before they stopped.
  EXPECT_GE(WatchClock::now() - silent_from, milliseconds(kSilence / 2));
  const std::optional<LostHost> lost = server.lost(WatchClock::now());
  EXPECT_EQ(lost->host, "h2");
  EXPECT_FALSE(lost->address.empty());
  EXPECT_EQ(lost->ranks, (std::vector<int>{2, 3}));
  EXPECT_EQ(c.state(), State::kWatching);
}

TEST(LinkWatch, AHostIsHeardWhileAnyOfItsRanksBeats) {
  WatchServer server(kInterval, kSilence, kTimeout);
  const WatchSettings settings = settings_of(server);
  WatchClient a(settings, 0, "h1", WatchClock::now()), b(settings, 1, "h1", WatchClock::now());
  ASSERT_TRUE(serve_until(server, {&a, &b}, [&] { return server.registered() == 2; }));
  // Rank 0 stops beating (a stopped process, say); rank 1 goes on.
  const auto until = WatchClock::now() + milliseconds(2 * kSilence);
  serve_until(server, {&b}, [&] { return WatchClock::now() > until; });
  const auto now = WatchClock::now();
  EXPECT_FALSE(server.lost(now));
  // The next deadline follows the host's latest beat (and the serving interval), not
  // the silent rank's: no deadline in the past to wake up for at once.
  EXPECT_GT(server.next_deadline(), now - milliseconds(kInterval));
  EXPECT_LE(server.next_deadline(), now + milliseconds(kInterval));
}

TEST(LinkWatch, SilenceWhileTheServerItselfWasStoppedIsForgiven) {
  WatchServer server(kInterval, kSilence, kTimeout);
  WatchClient a(settings_of(server), 4, "h3", WatchClock::now());
  ASSERT_TRUE(serve_until(server, {&a}, [&] { return server.registered() == 1; }));
  // Neither side runs for longer than the silence limit (a job suspended whole).
  std::this_thread::sleep_for(milliseconds(kSilence + 100));
  server.service(WatchClock::now());
  EXPECT_FALSE(server.lost(WatchClock::now()));
  // Served on, the server still finds the host lost once it is silent.
  ASSERT_TRUE(serve_until(server, {}, [&] { return server.lost(WatchClock::now()).has_value(); }));
  EXPECT_EQ(server.lost(WatchClock::now())->ranks, (std::vector<int>{4}));
}

TEST(LinkWatch, ARankThatEndsClosesItsConnectionAndIsNeverLost) {
  WatchServer server(kInterval, kSilence, kTimeout);
  auto a = std::make_unique<WatchClient>(settings_of(server), 1, "h2", WatchClock::now());
  ASSERT_TRUE(serve_until(server, {a.get()}, [&] { return server.registered() == 1; }));
  a.reset();
  ASSERT_TRUE(serve_until(server, {}, [&] { return server.registered() == 0; }));
  std::this_thread::sleep_for(milliseconds(kSilence + 50));
  server.service(WatchClock::now());
  EXPECT_FALSE(server.lost(WatchClock::now()));
  EXPECT_EQ(server.next_deadline(), WatchClock::time_point::max());
}

TEST(LinkWatch, AnotherJobsTokenIsNotHeard) {
  WatchServer server(kInterval, kSilence, kTimeout);
  WatchSettings other = settings_of(server);
  other.token = std::string(32, 'a');
  WatchClient stranger(other, 1, "h9", WatchClock::now());
  ASSERT_TRUE(serve_until(server, {&stranger}, [&] { return stranger.state() == State::kClosed; }))
      << "the server hangs up";
  EXPECT_EQ(server.registered(), 0u);
  std::this_thread::sleep_for(milliseconds(kSilence + 50));
  EXPECT_FALSE(server.lost(WatchClock::now()));
}

TEST(LinkWatch, AClientSeesTheJobEndAndAnAddressNobodyAnswers) {
  auto server = std::make_unique<WatchServer>(kInterval, kSilence, kTimeout);
  WatchClient client(settings_of(*server), 1, "h2", WatchClock::now());
  ASSERT_TRUE(serve_until(*server, {&client}, [&] { return server->registered() == 1; }));
  server.reset();  // cohortrun's job ended: the watch ends, the rank goes on
  const auto until = WatchClock::now() + std::chrono::seconds(5);
  while (client.state() == State::kWatching && WatchClock::now() < until) {
    std::this_thread::sleep_for(milliseconds(client.timeout_ms(WatchClock::now())));
    client.service(WatchClock::now());
  }
  EXPECT_EQ(client.state(), State::kClosed) << client.why();
  EXPECT_EQ(client.timeout_ms(WatchClock::now()), -1);

  // A port nobody listens on: refused at once.
  WatchSettings nowhere;
  nowhere.token = std::string(32, 'b');
  nowhere.addresses = {"127.0.0.1:1"};
  WatchClient refused(nowhere, 1, "h2", WatchClock::now());
  while (refused.state() == State::kConnecting && WatchClock::now() < until + std::chrono::seconds(5)) {
    std::this_thread::sleep_for(milliseconds(refused.timeout_ms(WatchClock::now())));
    refused.service(WatchClock::now());
  }
  EXPECT_EQ(refused.state(), State::kUnreachable);
  EXPECT_NE(refused.why().find("refused"), std::string::npos) << refused.why();
  nowhere.addresses = {"not-an-address:1"};
  WatchClient malformed(nowhere, 1, "h2", WatchClock::now());
  EXPECT_EQ(malformed.state(), State::kUnreachable);
  EXPECT_NE(malformed.why().find("not-an-address:1: not a numeric address"), std::string::npos) << malformed.why();
}

}  // namespace
}  // namespace cohortrun
