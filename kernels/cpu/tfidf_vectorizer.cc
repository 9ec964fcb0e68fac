// CPU kernel of kiln.tfidf_vectorizer: the vocabulary's n-grams in a trie
// (one node per prefix, a column where an n-gram ends), each row's n-grams
// walked from every start and every skip, counted per column, then turned
// into TF, IDF or TF-IDF values.
#include <algorithm>
#include <cstring>
#include <map>
#include <vector>

#include "cpu_kernel_util.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/dialect/search_ops.h"

namespace kiln::cpu {
namespace {

// The vocabulary's n-grams of min_gram_length to max_gram_length tokens.
// Node 0 is the root; a node's column is where the n-gram ending there
// counts (-1: a prefix only). A later duplicate n-gram takes the column.
class NgramTrie {
 public:
  explicit NgramTrie(const TfIdfVectorizerOp::Attributes& a) {
    std::size_t gram = 0;  // the pool's n-grams in order, of every length
    for (std::size_t i = 0; i < a.ngram_counts.size(); ++i) {
      const auto n = static_cast<std::int64_t>(i + 1);
      const std::size_t start = static_cast<std::size_t>(a.ngram_counts[i]);
      const std::size_t end = i + 1 < a.ngram_counts.size() ? static_cast<std::size_t>(a.ngram_counts[i + 1])
                                                             : a.pool.size();
      for (std::size_t at = start; at < end; at += static_cast<std::size_t>(n), ++gram)
        if (n >= a.min_gram_length && n <= a.max_gram_length)
          insert(&a.pool[at], n, a.ngram_indexes[gram]);
    }
  }
  // The child of `node` for `token`, or -1.
  std::int64_t next(std::int64_t node, std::int64_t token) const {
    const auto& kids = nodes_[static_cast<std::size_t>(node)].kids;
    const auto it = kids.find(token);
    return it == kids.end() ? -1 : it->second;
  }
  std::int64_t column(std::int64_t node) const { return nodes_[static_cast<std::size_t>(node)].column; }

 private:
  struct Node {
    std::map<std::int64_t, std::int64_t> kids;
    std::int64_t column = -1;
  };
  void insert(const std::int64_t* tokens, std::int64_t n, std::int64_t column) {
    std::int64_t node = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      std::int64_t kid = next(node, tokens[i]);
      if (kid < 0) {
        kid = static_cast<std::int64_t>(nodes_.size());
        nodes_[static_cast<std::size_t>(node)].kids.emplace(tokens[i], kid);
        nodes_.emplace_back();
      }
      node = kid;
    }
    nodes_[static_cast<std::size_t>(node)].column = column;
  }
  std::vector<Node> nodes_ = std::vector<Node>(1);
};

// Adds row's n-gram counts into counts[0, K): from every start, for every
// skip, the tokens start, start + d, start + 2d, ... (d = skip + 1) walked
// down the trie while they are a prefix of a vocabulary n-gram.
template <typename T>
void count_row_ngrams(const NgramTrie& trie, const TfIdfVectorizerOp::Attributes& a, const T* row, std::int64_t len,
               std::int64_t* counts) {
  std::int64_t shortest = a.min_gram_length;
  for (std::int64_t d = 1; d <= a.max_skip_count + 1; ++d) {
    if (shortest > 1 && d * (shortest - 1) >= len) break;  // no n-gram fits at this skip or a longer one
    for (std::int64_t start = 0; start + d * (shortest - 1) < len; ++start) {
      std::int64_t node = 0;
      for (std::int64_t n = 1, at = start; n <= a.max_gram_length && at < len; ++n, at += d) {
        node = trie.next(node, static_cast<std::int64_t>(row[at]));
        if (node < 0) break;
        if (n >= shortest && trie.column(node) >= 0) ++counts[trie.column(node)];
      }
    }
    if (shortest == 1 && ++shortest > a.max_gram_length) break;  // 1-grams: once, not per skip
  }
}

template <typename T>
struct TfIdfVectorizerK {
  static void run(KernelContext& ctx) {
    const auto& a = ctx.attrs<TfIdfVectorizerOp>();
    const std::string_view op = ctx.op()->name();
    const std::int64_t k = TfIdfVectorizerOp::output_size(op, a);
    const Tensor x = typed_input<T>(ctx, 0), w = typed_input<float>(ctx, 1);
    const Dims& xd = x.dims();
    if (xd.rank() > 2 || w.dims().rank() != 1 || (w.numel() != 0 && w.numel() < k))
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' x [", xd.to_string(), "] and weights [",
                  w.dims().to_string(), "] must be [C] or [B, C] and [", k, "] or longer or [0]");
    const std::int64_t rows = xd.rank() == 2 ? xd[0] : 1, len = xd.rank() == 0 ? 1 : xd[xd.rank() - 1];
    Tensor& y = ctx.alloc_output(0, xd.rank() == 2 ? Dims{rows, k} : Dims{k}, DataType::Float32);
    std::vector<std::int64_t> counts(static_cast<std::size_t>(k));
    const NgramTrie trie(a);
    const float* pw = w.numel() ? w.data<float>() : nullptr;
    const bool tf = a.mode == "TF", idf = a.mode == "IDF";
    for (std::int64_t r = 0; r < rows; ++r) {
      std::fill(counts.begin(), counts.end(), 0);
      count_row_ngrams(trie, a, x.data<T>() + r * len, len, counts.data());
      float* out = y.data<float>() + r * k;
      for (std::int64_t c = 0; c < k; ++c) {
        const auto n = static_cast<float>(counts[static_cast<std::size_t>(c)]);
        const float weight = pw ? pw[c] : 1.0f;
        out[c] = tf ? n : idf ? (n > 0 ? weight : 0.0f) : weight * n;
      }
    }
  }
};

}  // namespace

KILN_REGISTER_KERNELS(TfIdfVectorizerOp, Cpu, TfIdfVectorizerK, std::int32_t, std::int64_t);

}  // namespace kiln::cpu
