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

#include "failure.h"

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
  int status = 0;
  while (true) {
    siginfo_t info;
    const int sig = sigwaitinfo(&mask, &info);
    if (sig < 0) continue;  // EINTR
    if (sig != SIGCHLD) {
      if (sig != SIGCONT && sig != SIGTSTP && sig != SIGUSR1 && sig != SIGUSR2) told_to_stop = true;
      kill(child, sig == SIGTSTP ? SIGSTOP : sig);
      continue;
    }
    if (waitpid(child, &status, WNOHANG) == child) break;
  }

  char host[256] = "?";
  gethostname(host, sizeof host - 1);
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
