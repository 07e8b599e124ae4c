#include "shared/util/thread_pool.h"

#include <algorithm>
#include <cstdlib>

namespace waste {

ThreadPool::ThreadPool(unsigned threads) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  for (unsigned i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (auto& t : workers_) t.join();
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool([] {
    const char* env = std::getenv("WASTE_THREADS");
    int n = env ? std::atoi(env) : 0;
    return unsigned(n > 0 ? n : 0);
  }());
  return pool;
}

// Takes chunks until none are left; called by workers and by the caller of parallel_for.
void ThreadPool::run_chunks() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (body_ && next_ < n_) {
    size_t begin = next_;
    size_t end = std::min(n_, begin + chunk_);
    next_ = end;
    const auto* body = body_;
    lock.unlock();
    try {
      (*body)(begin, end);
    } catch (...) {
      lock.lock();
      if (!error_) error_ = std::current_exception();
      lock.unlock();
    }
    lock.lock();
    if (--chunks_left_ == 0) work_done_.notify_all();
  }
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      work_ready_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
    }
    run_chunks();
  }
}

void ThreadPool::parallel_for(size_t n, size_t grain, const std::function<void(size_t, size_t)>& body) {
  if (n == 0) return;
  grain = std::max<size_t>(grain, 1);
  if (workers_.empty() || n <= grain) {
    body(0, n);
    return;
  }
  std::lock_guard<std::mutex> one_loop(call_mutex_);
  // Four chunks per thread balances uneven chunks without much locking.
  size_t chunk = std::max(grain, (n + size() * 4 - 1) / (size() * 4));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    body_ = &body;
    n_ = n;
    chunk_ = chunk;
    next_ = 0;
    chunks_left_ = (n + chunk - 1) / chunk;
    error_ = nullptr;
    ++generation_;
  }
  work_ready_.notify_all();
  run_chunks();
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    work_done_.wait(lock, [&] { return chunks_left_ == 0; });
    body_ = nullptr;
    error = error_;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace waste
