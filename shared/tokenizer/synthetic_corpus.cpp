// The built-in text the synthetic tokenizer learns its merges from: plain English prose and a
// little C++, Python and shell, so that common words and code fragments become single tokens.
// Written for WASTE; any text would do, it only has to be fixed so the vocabulary is reproducible.
#include "shared/tokenizer/synthetic_ranks.h"

namespace waste::tok {

const char* synthetic_corpus() {
  return R"CORPUS(The quick brown fox jumps over the lazy dog. A journey of a thousand miles begins with a single step.
When the morning train left the station, the town was still asleep, and only the baker had his lights on.
She opened the window, looked at the river, and decided that today she would finally write the letter.
Weather report: clouds in the north, light rain in the afternoon, and a clear, cold night with stars.
The library closes at six o'clock on weekdays and at noon on Saturdays; it is closed on Sundays.
Please remember to bring your notebook, a pencil, and something to drink. We will be walking for hours.
In the beginning there was nothing but a small program that printed a greeting and then stopped.
Over the years it grew: first a parser, then a compiler, then a runtime that could run programs fast.
Every engineer on the team knew that the hardest part was not the code but the questions nobody asked.
Good tests answer those questions. They check real values, they fail when something is wrong, and they
run quickly enough that people actually run them before every change they make to the system.
Memory is fast, disks are slow, and networks are slower still; a careful design keeps each where it belongs.
The model reads a prompt, turns it into tokens, and predicts the next token one step at a time.
Each token is a number; the tokenizer maps text to numbers and numbers back to text without loss.
Large language models are trained on a great deal of text, and they learn patterns of words and ideas.
An expert is a small network; the router picks a few experts for every token and mixes their outputs.
What time is it? It is half past nine. Where are you going? I am going home. Why? Because it is late.
They said it couldn't be done, but we didn't listen. You'll see: they're wrong, and we've proven it.
Numbers: 0 1 2 3 4 5 6 7 8 9 10 11 12 20 42 100 256 512 1024 2048 4096 65536 3.14 2.718 1,000,000.
Dates like 2024-01-15 and times like 12:30:45 appear often, as do prices such as $19.99 and 5%.
The history of science is full of people who were curious, patient, and willing to be wrong in public.
Cooking is chemistry you can eat: heat changes proteins, sugar caramelizes, and salt brings out flavor.
A good map shows what matters and leaves out the rest; a good explanation does the same thing.
Children learn languages by listening, guessing, and trying again; adults can learn the same way.
The mountain path was steep and narrow, with loose stones, and the wind was strong near the top.
From the summit they could see the valley, the lake, the road, and the small white houses of the village.

#include <cstdint>
#include <string>
#include <vector>

namespace example {

// Returns the sum of the values in the vector.
int64_t sum(const std::vector<int64_t>& values) {
  int64_t total = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    total += values[i];
  }
  return total;
}

class Buffer {
 public:
  explicit Buffer(size_t size) : data_(size, 0) {}
  size_t size() const { return data_.size(); }
  uint8_t* data() { return data_.data(); }
  const uint8_t* data() const { return data_.data(); }

 private:
  std::vector<uint8_t> data_;
};

std::string greet(const std::string& name) {
  if (name.empty()) return "Hello, world!";
  return "Hello, " + name + "!";
}

}  // namespace example

def fibonacci(n):
    """Return the first n Fibonacci numbers."""
    result = []
    a, b = 0, 1
    for _ in range(n):
        result.append(a)
        a, b = b, a + b
    return result


class Counter:
    def __init__(self):
        self.counts = {}

    def add(self, key, value=1):
        self.counts[key] = self.counts.get(key, 0) + value
        return self.counts[key]

    def most_common(self, k=10):
        items = sorted(self.counts.items(), key=lambda kv: kv[1], reverse=True)
        return items[:k]


if __name__ == "__main__":
    print(fibonacci(10))
    counter = Counter()
    for word in "the cat and the dog and the bird".split():
        counter.add(word)
    print(counter.most_common(3))

#!/bin/sh
set -eu
for file in *.txt; do
  if [ -s "$file" ]; then
    echo "processing $file"
    wc -l "$file" | tee -a log.txt
  else
    echo "skipping empty $file" >&2
  fi
done

{"name": "example", "version": "1.0.0", "dependencies": {"library": "^2.3.4"}, "enabled": true, "count": 3}
SELECT id, name, created_at FROM users WHERE active = 1 ORDER BY created_at DESC LIMIT 10;
<div class="header"><a href="https://example.com/index.html">Home</a> | <a href="/about">About</a></div>
The end of the text is near, but the end of the story is not: there is always another page to turn.
)CORPUS";
}

}  // namespace waste::tok
