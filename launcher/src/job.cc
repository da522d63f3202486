#include "job.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string_view>

extern char** environ;

namespace cohortrun {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kKeepStderr = 256 * 1024;
constexpr int kForwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
// What mpirun prints when it loses one of its daemons (failure.cc reads the rest).
constexpr std::string_view kLostHostReport = "lost communication with a remote daemon";

void write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the reader is gone; keep running the job
    data += n;
    size -= static_cast<size_t>(n);
  }
}

// Processes whose parent is this process (the job's orphans, adopted by the subreaper).
std::vector<pid_t> own_children() {
  std::vector<pid_t> pids;
  const pid_t self = getpid();
  DIR* proc = opendir("/proc");
  if (!proc) return pids;
  while (dirent* entry = readdir(proc)) {
    const char* name = entry->d_name;
    if (name[0] < '0' || name[0] > '9') continue;
    std::ifstream stat(std::string("/proc/") + name + "/stat");
    std::string text;
    std::getline(stat, text);
    const size_t paren = text.rfind(')');
    if (paren == std::string::npos || paren + 4 >= text.size()) continue;
    // ") S PPID ..."
    const size_t ppid_at = text.find(' ', paren + 2);
    if (ppid_at == std::string::npos) continue;
    if (std::atoi(text.c_str() + ppid_at + 1) == self) pids.push_back(std::atoi(name));
  }
  closedir(proc);
  return pids;
}

class Job {
 public:
  Job(const std::vector<std::string>& argv, const JobOptions& options) : argv_(argv), options_(options) {}

  JobResult run() {
    start();
    loop();
    sigprocmask(SIG_SETMASK, &old_mask_, nullptr);
    close(signal_fd_);
    JobResult result;
    result.interrupted_by = interrupted_by_;
    result.mpirun_stderr = stderr_text_;
    if (interrupted_by_)
      result.exit_status = 128 + interrupted_by_;
    else if (stopped_lost_host_)
      result.exit_status = kLostHostStatus;
    else if (WIFEXITED(status_))
      result.exit_status = WEXITSTATUS(status_);
    else if (WIFSIGNALED(status_))
      result.exit_status = 128 + WTERMSIG(status_);
    if (result.exit_status != 0 && !interrupted_by_) result.failure = find_rank_failure(stderr_text_);
    if (stopped_lost_host_) result.stopped_lost_host_s = options_.lost_host_end_s;
    if (watch_lost_ && !interrupted_by_) {
      result.exit_status = kLostHostStatus;
      RankFailure f;
      f.node = watch_lost_->host;
      f.address = watch_lost_->address;
      f.lost_rank = watch_lost_->ranks.front();
      f.reason = "cohortrun lost its connection to host " + f.node + " (a link down or the host gone), where " +
                 ranks_text(watch_lost_->ranks) + " ran";
      result.failure = f;
    }
    return result;
  }

 private:
  void start() {
    sigset_t mask;
    sigemptyset(&mask);
    for (int s : kForwarded) sigaddset(&mask, s);
    sigaddset(&mask, SIGCHLD);
    sigprocmask(SIG_BLOCK, &mask, &old_mask_);
    signal_fd_ = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    if (signal_fd_ < 0) throw std::runtime_error(std::string("signalfd: ") + std::strerror(errno));
    prctl(PR_SET_CHILD_SUBREAPER, 1);

    int err[2], out[2] = {-1, -1};
    if (pipe2(err, O_CLOEXEC) != 0 || (options_.on_stdout_line && pipe2(out, O_CLOEXEC) != 0))
      throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
    std::vector<char*> args;
    for (const std::string& a : argv_) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    const std::vector<std::string> environment = start_watch();
    std::vector<char*> envp;
    for (const std::string& e : environment) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    const pid_t parent = getpid();
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
    if (pid_ == 0) {
      // mpirun gets its own process group: only cohortrun's forwarding reaches it, once.
      setpgid(0, 0);
      prctl(PR_SET_PDEATHSIG, SIGTERM);  // cohortrun killed → mpirun tears the job down
      if (getppid() != parent) _exit(128 + SIGTERM);
      dup2(err[1], STDERR_FILENO);
      if (out[1] >= 0) dup2(out[1], STDOUT_FILENO);
      for (int s : kForwarded) signal(s, SIG_DFL);
      sigprocmask(SIG_SETMASK, &old_mask_, nullptr);
      execve(args[0], args.data(), envp.data());
      const std::string message =
          std::string("cohortrun: cannot execute ") + args[0] + ": " + std::strerror(errno) + "\n";
      write_all(STDERR_FILENO, message.data(), message.size());
      _exit(127);
    }
    setpgid(pid_, pid_);
    close(err[1]);
    err_fd_ = err[0];
    if (out[1] >= 0) {
      close(out[1]);
      out_fd_ = out[0];
    }
  }

  // mpirun's environment: this process's, with the watch's settings when there is a watch.
  std::vector<std::string> start_watch() {
    const std::string prefix = std::string(kLinkWatchVariable) + "=";
    std::vector<std::string> environment;
    for (char** e = environ; e && *e; ++e)
      if (std::string_view(*e).substr(0, prefix.size()) != prefix) environment.emplace_back(*e);
    if (!options_.link_watch) return environment;
    const LinkWatch& w = *options_.link_watch;
    try {
      watch_ = std::make_unique<WatchServer>(w.interval_s * 1000, w.silence_s() * 1000, w.timeout_s * 1000);
      environment.push_back(prefix + watch_->settings_text());
    } catch (const std::runtime_error& e) {
      std::fprintf(stderr,
                   "cohortrun: cannot watch the links to the hosts itself (%s): a lost host is left to mpirun\n",
                   e.what());
      environment.push_back(prefix);  // set, so that mpirun's -x finds it; empty: no watch
    }
    return environment;
  }

  // Hears the ranks' heartbeats; a host silent for too long (before mpirun said anything)
  // gets the job SIGTERM now and SIGKILL at kill_at.
  void watch_links(Clock::time_point& kill_at) {
    if (!watch_) return;
    const Clock::time_point now = Clock::now();
    watch_->service(now);
    if (exited_ || interrupted_by_ || watch_lost_ || lost_host_end_at_ != Clock::time_point::max()) return;
    watch_lost_ = watch_->lost(now);
    if (!watch_lost_) return;
    const LinkWatch& w = *options_.link_watch;
    kill(pid_, SIGTERM);
    kill_at = std::min(kill_at, now + std::chrono::seconds(w.timeout_s - w.silence_s()));
  }

  void loop() {
    // Deadlines; time_point::max() = none.
    Clock::time_point kill_at = Clock::time_point::max(), give_up_at = Clock::time_point::max();
    while (true) {
      watch_links(kill_at);
      if (exited_) {
        // Anything still around was started by the job and lost its mpirun.
        for (pid_t orphan : own_children()) kill(orphan, SIGKILL);
        reap();
        if (give_up_at == Clock::time_point::max()) give_up_at = Clock::now() + std::chrono::seconds(2);
        if ((err_fd_ < 0 && out_fd_ < 0 && own_children().empty()) || Clock::now() > give_up_at) break;
      }
      if (!exited_ && Clock::now() >= kill_at) {
        kill(-pid_, SIGKILL);
        kill(pid_, SIGKILL);
        kill_at = Clock::time_point::max();
      }
      if (!exited_ && !interrupted_by_ && Clock::now() >= lost_host_end_at_) {
        stopped_lost_host_ = true;
        kill(-pid_, SIGKILL);
        kill(pid_, SIGKILL);
        lost_host_end_at_ = Clock::time_point::max();
      }
      pollfd fds[4] = {
          {signal_fd_, POLLIN, 0}, {err_fd_, POLLIN, 0}, {out_fd_, POLLIN, 0}, {watch_ ? watch_->fd() : -1, POLLIN, 0}};
      int timeout = -1;
      if (exited_) timeout = 50;
      Clock::time_point next = std::min(kill_at, lost_host_end_at_);
      if (watch_ && !watch_lost_ && !interrupted_by_ && lost_host_end_at_ == Clock::time_point::max())
        next = std::min(next, watch_->next_deadline());
      if (!exited_ && next != Clock::time_point::max())
        timeout = static_cast<int>(
            std::max<long>(1, std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now()).count()));
      if (poll(fds, 4, timeout) < 0 && errno != EINTR) break;
      if (fds[0].revents & POLLIN) signals(kill_at);
      if (fds[1].revents & (POLLIN | POLLHUP | POLLERR)) relay(err_fd_, STDERR_FILENO, true);
      if (fds[2].revents & (POLLIN | POLLHUP | POLLERR)) relay(out_fd_, STDOUT_FILENO, false);
    }
    if (err_fd_ >= 0) close(err_fd_);
    if (out_fd_ >= 0) close(out_fd_);
    if (!out_line_.empty() && options_.on_stdout_line) options_.on_stdout_line(out_line_);
  }

  void signals(Clock::time_point& kill_at) {
    signalfd_siginfo info;
    while (read(signal_fd_, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
      const int sig = static_cast<int>(info.ssi_signo);
      if (sig == SIGCHLD) {
        reap();
        continue;
      }
      if (exited_) continue;
      if (!interrupted_by_) {
        interrupted_by_ = sig;
        const std::string note = "cohortrun: " + signal_name(sig) + " received: stopping the job\n";
        write_all(STDERR_FILENO, note.data(), note.size());
        // mpirun answers SIGTERM by killing every rank (SIGINT takes it a second longer).
        kill(pid_, SIGTERM);
        kill_at = Clock::now() + std::chrono::milliseconds(static_cast<long>(options_.grace_s * 1000));
      } else {
        kill_at = Clock::now();  // a second signal: no more waiting
      }
    }
  }

  void reap() {
    int status = 0;
    pid_t p;
    while ((p = waitpid(-1, &status, WNOHANG)) > 0) {
      if (p == pid_) {
        status_ = status;
        exited_ = true;
      }
    }
  }

  void relay(int& fd, int to, bool is_stderr) {
    char buffer[65536];
    const ssize_t n = read(fd, buffer, sizeof buffer);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (n <= 0) {
      close(fd);
      fd = -1;
      return;
    }
    write_all(to, buffer, static_cast<size_t>(n));
    if (is_stderr) {
      // The report may straddle two reads: look again at the end of the text before this one.
      const size_t from =
          stderr_text_.size() > kLostHostReport.size() ? stderr_text_.size() - kLostHostReport.size() : 0;
      stderr_text_.append(buffer, static_cast<size_t>(n));
      if (options_.lost_host_end_s > 0 && lost_host_end_at_ == Clock::time_point::max() && !stopped_lost_host_ &&
          stderr_text_.find(kLostHostReport, from) != std::string::npos)
        lost_host_end_at_ =
            Clock::now() + std::chrono::milliseconds(static_cast<long>(options_.lost_host_end_s * 1000));
      if (stderr_text_.size() > kKeepStderr) stderr_text_.erase(0, stderr_text_.size() - kKeepStderr);
      return;
    }
    for (ssize_t i = 0; i < n; ++i) {
      if (buffer[i] == '\n') {
        options_.on_stdout_line(out_line_);
        out_line_.clear();
      } else {
        out_line_ += buffer[i];
      }
    }
  }

  const std::vector<std::string>& argv_;
  const JobOptions& options_;
  sigset_t old_mask_{};
  int signal_fd_ = -1, err_fd_ = -1, out_fd_ = -1;
  pid_t pid_ = -1;
  bool exited_ = false;
  int status_ = 0;
  int interrupted_by_ = 0;
  Clock::time_point lost_host_end_at_ = Clock::time_point::max();  // set once mpirun reports a lost host
  bool stopped_lost_host_ = false;
  std::unique_ptr<WatchServer> watch_;  // cohortrun's own watch over the links, when asked for
  std::optional<LostHost> watch_lost_;  // the host the watch stopped hearing from
  std::string stderr_text_, out_line_;
};

}  // namespace

JobResult run_job(const std::vector<std::string>& argv, const JobOptions& options) { return Job(argv, options).run(); }

void report_job(const JobResult& result, int np) {
  if (result.interrupted_by) {
    std::fprintf(stderr, "cohortrun: the job was stopped by %s (exit status %d)\n",
                 signal_name(result.interrupted_by).c_str(), result.exit_status);
  } else if (result.exit_status != 0) {
    if (result.stopped_lost_host_s > 0)
      std::fprintf(stderr,
                   "cohortrun: job failed (exit status %d): %s; mpirun had not ended %.0f s later, so "
                   "cohortrun stopped it\n",
                   result.exit_status,
                   result.failure ? result.failure->reason.c_str() : "mpirun lost its connection to a host",
                   result.stopped_lost_host_s);
    else if (result.failure)
      std::fprintf(stderr, "cohortrun: job failed (exit status %d): %s\n", result.exit_status,
                   result.failure->reason.c_str());
    else
      std::fprintf(stderr, "cohortrun: job of %d rank%s failed with exit status %d (mpirun did not say which rank)\n",
                   np, np == 1 ? "" : "s", result.exit_status);
  }
}

}  // namespace cohortrun
