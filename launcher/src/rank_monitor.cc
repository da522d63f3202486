#include "rank_monitor.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>

#include "failure.h"
#include "link_watch.h"

namespace cohortrun {
namespace {

constexpr int kPassedOn[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCONT, SIGTSTP};

int rank_from_environment() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"})
    if (const char* v = std::getenv(name)) return std::atoi(v);
  return -1;
}

void say(const std::string& line) {
  const std::string text = line + "\n";
  if (write(STDERR_FILENO, text.data(), text.size()) < 0) return;
}

// The watch over the link to cohortrun (link_watch.h), when cohortrun set one up. The
// variable is taken out of the environment: it is not the program's.
std::unique_ptr<WatchClient> start_watch(int rank, const std::string& host) {
  const char* value = std::getenv(kLinkWatchVariable);
  if (!value) return nullptr;
  const std::string text = value;
  unsetenv(kLinkWatchVariable);
  if (text.empty()) return nullptr;  // cohortrun could not set its watch up (and said so)
  std::string error;
  std::optional<WatchSettings> settings = parse_watch(text, &error);
  if (!settings) {
    say("cohortrun-monitor: rank " + std::to_string(rank) + " on " + host + ": " + kLinkWatchVariable + ": " + error +
        " (cohortrun of another version?): no link watch");
    return nullptr;
  }
  return std::make_unique<WatchClient>(std::move(*settings), rank, host, WatchClock::now());
}

// Serves the watch; stops the program when cohortrun's host is out of reach. A watch
// that ended is dropped (a rank that cannot reach cohortrun is left to mpirun: the
// first rank on each host says so).
void serve_watch(std::unique_ptr<WatchClient>& watch, pid_t child, int rank, const std::string& host,
                 bool& told_to_stop) {
  const WatchClient::State state = watch->service(WatchClock::now());
  if (state == WatchClient::State::kConnecting || state == WatchClient::State::kWatching) return;
  const char* local_rank = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  if (state == WatchClient::State::kUnreachable && local_rank && std::string(local_rank) == "0")
    say("cohortrun-monitor: rank " + std::to_string(rank) + " on " + host + " cannot reach cohortrun (" + watch->why() +
        "): a lost link is left to mpirun's keepalive");
  if (state == WatchClient::State::kLost) {
    say("cohortrun-monitor: rank " + std::to_string(rank) + " on " + host + " is cut off from cohortrun (" +
        watch->why() + "): stopping it");
    told_to_stop = true;
    kill(child, SIGKILL);
  }
  watch.reset();
}

// Passes signals on to the program and serves the watch until the program ends; its wait status.
int wait_for(pid_t child, const sigset_t& mask, std::unique_ptr<WatchClient>& watch, int rank, const std::string& host,
             bool& told_to_stop) {
  int status = 0;
  while (true) {
    siginfo_t info;
    int sig;
    if (watch && watch->timeout_ms(WatchClock::now()) < 0) serve_watch(watch, child, rank, host, told_to_stop);
    if (watch) {
      const int ms = watch->timeout_ms(WatchClock::now());
      const timespec wait{ms / 1000, (ms % 1000) * 1000000L};
      sig = sigtimedwait(&mask, &info, &wait);
      serve_watch(watch, child, rank, host, told_to_stop);
    } else {
      sig = sigwaitinfo(&mask, &info);
    }
    if (sig < 0) continue;  // EINTR, or the watch's time
    if (sig != SIGCHLD) {
      if (sig != SIGCONT && sig != SIGTSTP && sig != SIGUSR1 && sig != SIGUSR2) told_to_stop = true;
      kill(child, sig == SIGTSTP ? SIGSTOP : sig);
      continue;
    }
    if (waitpid(child, &status, WNOHANG) == child) return status;
  }
}

}  // namespace

std::string rank_report(int rank, long pid, const std::string& host, int exit_code, int signal) {
  std::string how = signal ? "was killed by " + signal_name(signal) + " (" + strsignal(signal) + ")"
                           : "exited with status " + std::to_string(exit_code);
  return "cohortrun: rank " + std::to_string(rank) + " (pid " + std::to_string(pid) + " on " + host + ") " + how;
}

int run_rank_monitor(const std::vector<std::string>& program) {
  const int rank = rank_from_environment();
  if (program.empty()) {
    say("cohortrun-monitor: no program to run (usage: cohortrun-monitor -- PROGRAM ARGS)");
    return 2;
  }
  sigset_t mask, old;
  sigemptyset(&mask);
  for (int s : kPassedOn) sigaddset(&mask, s);
  sigaddset(&mask, SIGCHLD);
  sigprocmask(SIG_BLOCK, &mask, &old);

  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  std::unique_ptr<WatchClient> watch = start_watch(rank, host);
  std::vector<char*> argv;
  for (const std::string& a : program) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  int exec_failed[2];  // written to only when execvp fails (close-on-exec otherwise)
  if (pipe2(exec_failed, O_CLOEXEC) != 0) {
    say(std::string("cohortrun: rank ") + std::to_string(rank) + ": pipe: " + std::strerror(errno));
    return 1;
  }
  const pid_t parent = getpid();
  const pid_t child = fork();
  if (child < 0) {
    say(std::string("cohortrun: rank ") + std::to_string(rank) + ": fork: " + std::strerror(errno));
    return 1;
  }
  if (child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // the monitor killed outright → so is the program
    if (getppid() != parent) _exit(128 + SIGKILL);
    sigprocmask(SIG_SETMASK, &old, nullptr);
    execvp(argv[0], argv.data());
    const int error = errno;
    say("cohortrun: rank " + std::to_string(rank) + ": cannot execute " + program[0] + ": " + std::strerror(error));
    if (write(exec_failed[1], &error, sizeof error) < 0) _exit(127);
    _exit(127);
  }
  close(exec_failed[1]);
  int exec_error = 0;
  const bool started = read(exec_failed[0], &exec_error, sizeof exec_error) <= 0;
  close(exec_failed[0]);

  bool told_to_stop = false;  // the job is being torn down: the program's end is not news
  if (!started) watch.reset();
  const int status = wait_for(child, mask, watch, rank, host, told_to_stop);
  watch.reset();  // closes the connection: the rank's end is not a lost link
  if (WIFEXITED(status)) {
    const int code = WEXITSTATUS(status);
    if (code != 0 && started && !told_to_stop) say(rank_report(rank, child, host, code, 0));
    std::exit(code);
  }
  const int sig = WIFSIGNALED(status) ? WTERMSIG(status) : SIGKILL;
  if (!told_to_stop) say(rank_report(rank, child, host, 0, sig));
  // End the same way, so that mpirun sees the signal; the program already dumped core.
  prctl(PR_SET_DUMPABLE, 0);
  signal(sig, SIG_DFL);
  sigprocmask(SIG_SETMASK, &old, nullptr);
  sigset_t just;
  sigemptyset(&just);
  sigaddset(&just, sig);
  sigprocmask(SIG_UNBLOCK, &just, nullptr);
  raise(sig);
  std::_Exit(128 + sig);
}

}  // namespace cohortrun
