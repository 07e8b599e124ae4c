#include "tools/serve/images.h"

#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>

#include "shared/chat/chat_request.h"
#include "shared/image/data_url.h"
#include "shared/image/image_decode.h"
#include "shared/util/error.h"

namespace waste::serve {

namespace {

[[noreturn]] void refuse(const std::string& field, const std::string& message) { throw chat::RequestError(field, message); }

// Closes the descriptor however the read ends.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A file:// URL's path with its %XX escapes decoded (file:///a%20b.png is "/a b.png"). Only the
// local host: file://HOST/... names another machine's file.
std::string file_url_path(const std::string& url, const std::string& field) {
  const std::string rest = url.substr(7);
  std::string path = starts_with_nocase(rest, "localhost/") ? rest.substr(9) : rest;
  if (path.empty() || path[0] != '/') refuse(field, "a file:// URL must name a local absolute path (file:///DIR/NAME.png)");
  std::string out;
  for (size_t i = 0; i < path.size(); ++i) {
    if (path[i] != '%') {
      out += path[i];
      continue;
    }
    const int hi = i + 2 < path.size() ? hex_value(path[i + 1]) : -1, lo = hi >= 0 ? hex_value(path[i + 2]) : -1;
    if (lo < 0) refuse(field, "the file:// URL has a malformed %-escape");
    out += char(hi * 16 + lo);
    i += 2;
  }
  return out;
}

// `path` split at '/', without empty and "." components; a ".." is refused (it is the one way a
// name under the directory could point above it without a symbolic link).
std::vector<std::string> components(const std::string& path, const std::string& field) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= path.size()) {
    const size_t slash = std::min(path.find('/', at), path.size());
    const std::string c = path.substr(at, slash - at);
    if (c == "..") refuse(field, "an image path must not contain '..'");
    if (!c.empty() && c != ".") out.push_back(c);
    at = slash + 1;
  }
  return out;
}

// `parts` joined with '/', relative ("sub/c.png").
std::string joined(const std::vector<std::string>& parts) {
  std::string s;
  for (const std::string& p : parts) s += (s.empty() ? "" : "/") + p;
  return s;
}

// The rest of `parts` after `prefix` (nullopt when `parts` does not start with it, or is it).
std::optional<std::vector<std::string>> under(const std::vector<std::string>& parts, const std::vector<std::string>& prefix) {
  if (parts.size() <= prefix.size() || !std::equal(prefix.begin(), prefix.end(), parts.begin())) return std::nullopt;
  return std::vector<std::string>(parts.begin() + ptrdiff_t(prefix.size()), parts.end());
}

// openat2(2) beneath `dir_fd`: no symbolic link followed anywhere on the way (nor /proc's magic
// links), no component resolved above the directory. glibc has no wrapper: the raw syscall.
int open_beneath(int dir_fd, const char* relative, uint64_t flags) {
  struct open_how how {};
  how.flags = flags;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  for (;;) {
    const long fd = ::syscall(SYS_openat2, dir_fd, relative, &how, sizeof how);
    if (fd >= 0 || errno != EINTR) return int(fd);
  }
}

std::vector<uint8_t> read_bounded(int fd, uint64_t max_bytes, const std::string& field) {
  std::vector<uint8_t> out;
  uint8_t buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) refuse(field, std::string("reading the image file failed: ") + std::strerror(errno));
    if (n == 0) return out;
    if (out.size() + size_t(n) > max_bytes) refuse(field, "the image file is more than " + std::to_string(max_bytes) + " bytes");
    out.insert(out.end(), buf, buf + n);
  }
}

}  // namespace

ImageDir::ImageDir(const std::string& dir) {
  char real[PATH_MAX];
  require(::realpath(dir.c_str(), real) != nullptr, "--image-dir " + dir + ": " + std::strerror(errno));
  // "/" would let a client read every file of the machine the server may read.
  require(std::string(real) != "/", "--image-dir " + dir + ": the root directory would expose every file");
  const int fd = ::open(real, O_PATH | O_DIRECTORY | O_CLOEXEC);
  require(fd >= 0, "--image-dir " + dir + ": " + (errno == ENOTDIR ? std::string("not a directory") : std::strerror(errno)));
  auto owned = std::shared_ptr<const int>(new int(fd), [](const int* p) {
    ::close(*p);
    delete p;
  });
  struct stat st {};
  require(::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode), "--image-dir " + dir + ": not a directory");
  // The kernel must resolve each name beneath the directory itself: without openat2 the server
  // would have to check paths it does not open atomically, so it refuses to start instead.
  const int probe = open_beneath(fd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (probe < 0) {
    const int e = errno;
    require(e != ENOSYS, "--image-dir " + dir + ": this kernel has no openat2(2) (Linux 5.6 or later), which "
                         "--image-dir needs to open files beneath the directory safely");
    throw Error("--image-dir " + dir + ": openat2(2) beneath the directory failed: " + std::strerror(e) +
                " (a seccomp filter refusing it?); --image-dir needs it to open files safely");
  }
  ::close(probe);
  root_ = real;
  dir_fd_ = std::move(owned);
}

std::string ImageDir::relative_path(const std::string& ref, const std::string& field) const {
  if (!enabled()) refuse(field, "this server reads no local image files (waste-serve --image-dir DIR allows them)");
  if (ref.find('\0') != std::string::npos) refuse(field, "the image path holds a NUL byte");
  const std::string path = starts_with_nocase(ref, "file://") ? file_url_path(ref, field) : ref;
  const std::vector<std::string> parts = components(path, field);
  if (path.empty() || path[0] != '/') {
    if (parts.empty()) refuse(field, "the image path names no file");
    return joined(parts);
  }
  const auto rest = under(parts, components(root_, field));
  if (!rest) refuse(field, "the image path is not under the server's --image-dir (" + root_ + ")");
  return joined(*rest);
}

std::vector<uint8_t> ImageDir::read(const std::string& ref, const std::string& field, uint64_t max_bytes) const {
  const std::string relative = relative_path(ref, field);
  Fd f;
  // Beneath the directory, no link followed on the way (the kernel checks each component as it
  // resolves it: nothing can be swapped in between); O_NONBLOCK: a FIFO cannot hang the open.
  f.fd = open_beneath(*dir_fd_, relative.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (f.fd < 0) {
    if (errno == ELOOP) refuse(field, "the image path goes through a symbolic link (not followed)");
    if (errno == EXDEV) refuse(field, "the image path is not under the server's --image-dir (" + root_ + ")");
    if (errno == ENOSYS) refuse(field, "this kernel has no openat2(2): the server reads no local image files");
    refuse(field, "cannot open the image file " + ref + ": " + std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(f.fd, &st) != 0 || !S_ISREG(st.st_mode)) refuse(field, "the image path is not a regular file");
  if (uint64_t(st.st_size) > max_bytes) refuse(field, "the image file is more than " + std::to_string(max_bytes) + " bytes");
  return read_bounded(f.fd, max_bytes, field);
}

void load_images(ParsedRequest& p, const ImageDir& dir) {
  uint64_t total = 0;
  for (const ImagePart& im : p.images) {
    chat::ContentPart& part = p.request.chat.messages[im.message].content[im.part];
    const uint64_t left = kMaxImageBytesPerRequest - total;
    part.data = im.local_file ? dir.read(part.text, im.url_field, left) : decode_image_data_url(part.text, im.url_field, left);
    if (part.data.empty()) refuse(im.field, "the image is empty (0 bytes)");
    part.text.clear();  // sent as the file itself: a part has one or the other
    total += part.data.size();
  }
}

void check_images_decode(const ParsedRequest& p) {
  for (const ImagePart& im : p.images) {
    const chat::ContentPart& part = p.request.chat.messages[im.message].content[im.part];
    try {
      decode_image(part.data, im.field);
    } catch (const Error& e) {
      // The decoder's message starts with the source it was given, which RequestError adds again.
      const std::string what = e.what(), prefix = im.field + ": ";
      refuse(im.field, what.rfind(prefix, 0) == 0 ? what.substr(prefix.size()) : what);
    }
  }
}

}  // namespace waste::serve
