#include "tools/serve/images.h"

#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
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

bool starts_with_nocase(const std::string& s, const char* prefix) {
  const size_t n = std::strlen(prefix);
  if (s.size() < n) return false;
  for (size_t i = 0; i < n; ++i)
    if (std::tolower(static_cast<unsigned char>(s[i])) != prefix[i]) return false;
  return true;
}

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

std::string joined(const std::vector<std::string>& parts) {
  std::string s;
  for (const std::string& p : parts) s += "/" + p;
  return s;
}

// The rest of `parts` after `prefix` (empty when `parts` does not start with it).
std::optional<std::vector<std::string>> under(const std::vector<std::string>& parts, const std::vector<std::string>& prefix) {
  if (parts.size() <= prefix.size() || !std::equal(prefix.begin(), prefix.end(), parts.begin())) return std::nullopt;
  return std::vector<std::string>(parts.begin() + ptrdiff_t(prefix.size()), parts.end());
}

// The path a descriptor was opened at, as the kernel resolved it.
std::string opened_path(int fd) {
  char buf[PATH_MAX + 1];
  const std::string link = "/proc/self/fd/" + std::to_string(fd);
  const ssize_t n = ::readlink(link.c_str(), buf, PATH_MAX);
  return n > 0 ? std::string(buf, size_t(n)) : std::string();
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
  struct stat st {};
  require(::stat(real, &st) == 0 && S_ISDIR(st.st_mode), "--image-dir " + dir + ": not a directory");
  // "/" would let a client read every file of the machine the server may read.
  require(std::string(real) != "/", "--image-dir " + dir + ": the root directory would expose every file");
  root_ = real;
}

std::string ImageDir::path_of(const std::string& ref, const std::string& field) const {
  if (!enabled()) refuse(field, "this server reads no local image files (waste-serve --image-dir DIR allows them)");
  if (ref.find('\0') != std::string::npos) refuse(field, "the image path holds a NUL byte");
  const std::string path = starts_with_nocase(ref, "file://") ? file_url_path(ref, field) : ref;
  const std::vector<std::string> parts = components(path, field);
  if (path[0] != '/') {
    if (parts.empty()) refuse(field, "the image path names no file");
    return root_ + joined(parts);
  }
  const auto rest = under(parts, components(root_, field));
  if (!rest) refuse(field, "the image path is not under the server's --image-dir (" + root_ + ")");
  return root_ + joined(*rest);
}

std::vector<uint8_t> ImageDir::read(const std::string& ref, const std::string& field, uint64_t max_bytes) const {
  const std::string path = path_of(ref, field);
  Fd f;
  // O_NOFOLLOW: the file itself must not be a link; O_NONBLOCK: a FIFO must not hang the open.
  f.fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (f.fd < 0) {
    if (errno == ELOOP) refuse(field, "the image path is a symbolic link (not followed)");
    refuse(field, "cannot open the image file " + ref + ": " + std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(f.fd, &st) != 0 || !S_ISREG(st.st_mode)) refuse(field, "the image path is not a regular file");
  // Where the open really landed: a symbolic link among the directories on the way would make it
  // differ from the path named (checked on the open file, so nothing can change in between).
  if (opened_path(f.fd) != path) refuse(field, "the image path goes through a symbolic link (not followed)");
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
