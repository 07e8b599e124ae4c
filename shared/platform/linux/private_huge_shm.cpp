// A shared-memory file on 2 MiB pages without root (shared/platform/shm.h): a child process
// enters a user and mount namespace of its own, mounts a tmpfs with huge=within_size there (a
// mount's own huge= option is honoured whatever shmem_enabled says, and an unprivileged user
// may mount a tmpfs inside its own namespaces), creates an unnamed file on it (O_TMPFILE) and
// hands the descriptor back over a socket pair. The child then exits, its namespaces go with
// it, and the file system lives on as long as a descriptor or mapping of the file does: nothing
// is left behind by any exit, and no other process can open the file by a name.
//
// The child is a fork of a process that may have threads: between fork and _exit it makes
// system calls only (no allocation, no locks), on buffers prepared before the fork.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "shared/platform/shm.h"

namespace waste::platform {

namespace {

constexpr uint64_t kHugePage = uint64_t(2) << 20;
// The child makes a dozen system calls; a second is ample even on a loaded machine, five
// leave room for a stalled one before the caller falls back to /dev/shm.
constexpr int kChildDeadlineMs = 5000;

// Which step of the child failed: sent back with its errno when no descriptor comes.
enum Step : int { kUnshare = 1, kSetgroups, kUidMap, kGidMap, kMount, kCreate, kTruncate, kSend };

const char* step_name(int step) {
  switch (step) {
    case kUnshare: return "unshare(CLONE_NEWUSER | CLONE_NEWNS)";
    case kSetgroups: return "writing /proc/self/setgroups";
    case kUidMap: return "writing /proc/self/uid_map";
    case kGidMap: return "writing /proc/self/gid_map";
    case kMount: return "mounting a tmpfs with huge=within_size";
    case kCreate: return "creating a file on it (O_TMPFILE)";
    case kTruncate: return "sizing the file";
    case kSend: return "passing the descriptor back";
    default: return "an unknown step";
  }
}

bool write_all(const char* path, const char* text) {
  const int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const size_t n = std::strlen(text);
  const ssize_t w = ::write(fd, text, n);
  const int err = w < 0 ? errno : EIO;  // a short write sets no errno of its own
  ::close(fd);
  if (w == ssize_t(n)) return true;
  errno = err;
  return false;
}

// Sends {step, errno} and, when fd >= 0, the descriptor.
void send_result(int sock, int step, int err, int fd) {
  int payload[2] = {step, err};
  iovec iov{payload, sizeof payload};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  }
  (void)::sendmsg(sock, &msg, MSG_NOSIGNAL);
}

// Everything the child needs, formatted before the fork.
struct ChildPlan {
  char uid_map[64];
  char gid_map[64];
  char mount_options[128];
  uint64_t bytes;
  int sock;
};

[[noreturn]] void child_main(const ChildPlan& p) {
  auto fail = [&](int step, int err) {
    send_result(p.sock, step, err, -1);
    ::_exit(1);
  };
  // Only the socket stays open: a child stuck in a call must not hold iod's descriptors (its
  // run directory's lock among them) after iod is gone.
  ::syscall(SYS_close_range, unsigned(p.sock) + 1, ~0U, 0);
  for (int fd = 0; fd < p.sock; ++fd) ::close(fd);
  if (::unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) fail(kUnshare, errno);
  // Map this user to itself, so the file is owned by it outside the namespace too.
  if (!write_all("/proc/self/setgroups", "deny")) fail(kSetgroups, errno);
  if (!write_all("/proc/self/uid_map", p.uid_map)) fail(kUidMap, errno);
  if (!write_all("/proc/self/gid_map", p.gid_map)) fail(kGidMap, errno);
  // Any directory will do as the mount point: the mount exists in this namespace only (a
  // namespace a less privileged user made gets its shared mounts as slaves: nothing
  // propagates out).
  const char* targets[] = {"/dev/shm", "/tmp", "/run", "/mnt"};
  const char* target = nullptr;
  int first_err = 0;  // the first target's refusal says why (a later one may only be missing)
  for (const char* t : targets) {
    if (::mount("waste-iod", t, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, p.mount_options) == 0) {
      target = t;
      break;
    }
    if (first_err == 0) first_err = errno;
  }
  if (target == nullptr) fail(kMount, first_err);
  const int fd = ::open(target, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) fail(kCreate, errno);
  if (::ftruncate(fd, off_t(p.bytes)) != 0) fail(kTruncate, errno);
  send_result(p.sock, 0, 0, fd);
  ::_exit(0);
}

// Receives {step, errno} and a descriptor (or -1) within the deadline.
int receive_result(int sock, int& step, int& err) {
  pollfd pfd{sock, POLLIN, 0};
  int r;
  do r = ::poll(&pfd, 1, kChildDeadlineMs);
  while (r < 0 && errno == EINTR);
  if (r <= 0) {
    step = kSend;
    err = r == 0 ? ETIMEDOUT : errno;
    return -1;
  }
  int payload[2] = {kSend, EPROTO};
  iovec iov{payload, sizeof payload};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  const ssize_t n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  if (n > 0 && (msg.msg_flags & MSG_CTRUNC)) {  // the kernel dropped the descriptor: no room for it here
    step = kSend;
    err = EMFILE;
    return -1;
  }
  int fd = -1;
  for (cmsghdr* c = n > 0 ? CMSG_FIRSTHDR(&msg) : nullptr; c; c = CMSG_NXTHDR(&msg, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS && c->cmsg_len == CMSG_LEN(sizeof(int)))
      std::memcpy(&fd, CMSG_DATA(c), sizeof(int));
  if (n != ssize_t(sizeof payload)) {
    if (fd >= 0) ::close(fd);
    step = kSend;
    err = n < 0 ? errno : ECHILD;  // nothing came: the child died first (the caller reports how)
    return -1;
  }
  step = payload[0];
  err = payload[1];
  if (step != 0 && fd >= 0) {
    ::close(fd);
    fd = -1;
  }
  return fd;
}

// Why this process would get 4 KiB pages even on a tmpfs with huge=: "" when nothing says so.
// (The mount and the file succeed either way; only the pages differ.)
std::string huge_pages_refused() {
  if (::prctl(PR_GET_THP_DISABLE, 0, 0, 0, 0) == 1) return "transparent huge pages are disabled for this process";
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/shmem_enabled");
  if (!f) return "this kernel has no transparent huge pages";
  std::stringstream text;
  text << f.rdbuf();
  if (text.str().find("[deny]") != std::string::npos) return "shmem_enabled is deny (huge pages refused for all shared memory)";
  return "";
}

}  // namespace

int create_private_huge_shm(uint64_t bytes, std::string& why) {
  why = huge_pages_refused();
  if (!why.empty()) return -1;
  ChildPlan plan{};
  std::snprintf(plan.uid_map, sizeof plan.uid_map, "%u %u 1", unsigned(::geteuid()), unsigned(::geteuid()));
  std::snprintf(plan.gid_map, sizeof plan.gid_map, "%u %u 1", unsigned(::getegid()), unsigned(::getegid()));
  // The file system's size= bounds its pages (a fault past it is SIGBUS, not a bigger file): the
  // file in whole huge pages (the caller sized it) and one more for slack.
  const uint64_t fs_bytes = (bytes + kHugePage - 1) / kHugePage * kHugePage + kHugePage;
  std::snprintf(plan.mount_options, sizeof plan.mount_options, "huge=within_size,size=%llu,nr_inodes=16,mode=0700",
                (unsigned long long)fs_bytes);
  plan.bytes = bytes;
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    why = std::string("socketpair: ") + std::strerror(errno);
    return -1;
  }
  plan.sock = sv[1];
  const pid_t pid = ::fork();
  if (pid < 0) {
    why = std::string("fork: ") + std::strerror(errno);
    ::close(sv[0]);
    ::close(sv[1]);
    return -1;
  }
  if (pid == 0) child_main(plan);
  ::close(sv[1]);
  int step = 0, err = 0;
  const int fd = receive_result(sv[0], step, err);
  ::close(sv[0]);
  // The child has sent all it will (or is stuck past the deadline): the wait below must not
  // depend on it exiting by itself. A child already exited is a zombie, which the kill leaves be.
  ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (fd < 0) {
    if (err == ECHILD && WIFSIGNALED(status) && WTERMSIG(status) != SIGKILL)
      why = std::string("the helper process was killed by signal ") + std::to_string(WTERMSIG(status)) +
            " (a seccomp filter?)";
    else
      why = std::string(step_name(step)) + ": " + std::strerror(err);
    return -1;
  }
  // Trust only what was asked for: a regular file of this user, of the size, on a tmpfs.
  struct stat st {};
  struct statfs sfs {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid() || uint64_t(st.st_size) != bytes ||
      ::fstatfs(fd, &sfs) != 0 || sfs.f_type != 0x01021994 /* TMPFS_MAGIC */) {
    ::close(fd);
    why = "the file passed back is not a tmpfs file of this user of the size asked for";
    return -1;
  }
  return fd;
}

}  // namespace waste::platform
