#include "core/digest.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <thread>

namespace seqto {

namespace {

struct FdCloser {
  int fd;
  ~FdCloser() { ::close(fd); }
};

struct CtxFree {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};

}  // namespace

Expected<std::string> Sha256File(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return UserError(path + ": cannot open: " + std::strerror(errno));
  FdCloser closer{fd};
  std::unique_ptr<EVP_MD_CTX, CtxFree> ctx(EVP_MD_CTX_new());
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1)
    return InternalError("SHA-256 is not available from libcrypto");
  std::unique_ptr<unsigned char[]> buf(new unsigned char[1 << 16]);
  for (;;) {
    const ssize_t n = ::read(fd, buf.get(), 1 << 16);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      return UserError(path + ": read failed: " + std::strerror(errno));
    }
    EVP_DigestUpdate(ctx.get(), buf.get(), static_cast<size_t>(n));
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx.get(), md, &len);
  static const char* kHex = "0123456789abcdef";
  std::string hex;
  for (unsigned int i = 0; i < len; ++i) {
    hex += kHex[md[i] >> 4];
    hex += kHex[md[i] & 15];
  }
  return hex;
}

Expected<std::vector<std::string>> Sha256Files(const std::vector<std::string>& paths, int threads) {
  std::vector<Expected<std::string>> results(paths.size(), Expected<std::string>(std::string()));
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < paths.size();) results[i] = Sha256File(paths[i]);
  };
  // Reading many small files is bound by system calls and the page cache more than by
  // the hash: a few threads help even on few cores.
  size_t n = threads > 0 ? static_cast<size_t>(threads) : std::max(2u, std::thread::hardware_concurrency());
  n = std::min(n, std::max<size_t>(paths.size() / 16, 1));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < n; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  std::vector<std::string> out;
  for (auto& r : results) {
    if (!r) return r.error();
    out.push_back(std::move(*r));
  }
  return out;
}

}  // namespace seqto
