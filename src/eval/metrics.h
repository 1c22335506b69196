// Metrics over a model's outputs: accuracy against labels, and agreement of a
// candidate (e.g. quantized) model with a reference (float) model. Pure functions;
// the accumulators let `seqto eval` and the tuner feed batches without keeping every
// output, and give results identical to the whole-tensor functions (same summation
// order, so bit-for-bit, however the samples are split into batches).
//
// Score tensors: axis 0 is the sample axis; each sample's remaining elements,
// flattened, are its C class scores (logits, probabilities, anything where higher
// means "more likely"). Any numeric dtype (float32 is the usual one); values are
// compared in double. A rank-1 tensor [N] has C = 1.
//
// Ranking rules shared by every top-k here (Top1, TopKAccuracy, Top5Overlap,
// KendallTauTop5): classes are ordered by score descending, equal scores by class
// index ascending (the lowest index wins a tie, as numpy's argmax does). For ranking
// a NaN counts as -infinity, so it never beats a number. (SQNR and KL use the raw
// values: a NaN there makes the result NaN.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace seqto {

// ---------------------------------------------------------------- accuracy

// Top-1 class per sample (what `--save-predictions` writes). Error if the tensor is
// undefined, rank 0, or not numeric.
Expected<std::vector<int64_t>> Top1(const Tensor& scores);

// Percentage (0..100) of samples whose label is among the k best classes. k larger
// than C is clamped to C. Errors: k < 1, labels.size() != N, a label outside [0, C)
// ("label 12 of sample 3 is outside the 10 classes [0, 10)"), no samples.
Expected<double> TopKAccuracy(const Tensor& scores, const std::vector<int64_t>& labels, int k);

struct AccuracyMetrics {
  int64_t samples = 0;
  int64_t classes = 0;
  double top1 = 0;  // percent
  double top5 = 0;  // percent; k = min(5, C)
};

// Streaming TopKAccuracy for k = 1 and k = 5. Every batch must have the same C.
// Errors name the sample by its index over all batches added so far.
class AccuracyAccumulator {
 public:
  Status Add(const Tensor& scores, const std::vector<int64_t>& labels);
  // Error if no sample was added.
  Expected<AccuracyMetrics> Result() const;
  int64_t samples() const { return samples_; }

 private:
  int64_t samples_ = 0, classes_ = -1;
  int64_t top1_hits_ = 0, top5_hits_ = 0;
};

// ---------------------------------------------------------------- SQNR

// SQNR as docs/design.md (Error metrics and rankers) defines it, in dB (higher = better):
//   20 * log10( max(||x||2, eps) / max(||x - y||2, eps) ),  eps = DBL_EPSILON
// x is the reference (signal), y the approximation. Identical inputs give a large
// but finite value (20*log10(||x||/eps), about 313 dB for ||x|| = 1); two all-zero
// inputs give 0 dB. NaN in the inputs gives NaN.
double SqnrDb(const double* x, const double* y, size_t n);
double SqnrDb(const float* x, const float* y, size_t n);

// SQNR over many pieces concatenated (per-layer SQNR over all samples). Sums of
// squares are kept in double; Db() of the pieces equals SqnrDb of their concatenation.
class SqnrAccumulator {
 public:
  void Add(const double* x, const double* y, size_t n);
  void Add(const float* x, const float* y, size_t n);
  // Any numeric dtypes; error unless both have the same number of elements.
  Status Add(const Tensor& x, const Tensor& y);
  double Db() const;
  double signal_sumsq() const { return signal_sumsq_; }
  double noise_sumsq() const { return noise_sumsq_; }
  size_t count() const { return count_; }

 private:
  double signal_sumsq_ = 0, noise_sumsq_ = 0;
  size_t count_ = 0;
};

// ---------------------------------------------------------------- agreement
//
// `ref` is the reference model's output, `cand` the candidate's; both must have the
// same shape (error naming both shapes otherwise) and at least one sample.

// Percentage (0..100) of samples whose top-1 class differs.
Expected<double> Top1Disagreement(const Tensor& ref, const Tensor& cand);

// Mean over samples of |topk(ref) ∩ topk(cand)| / k with k = min(5, C); in 0..1.
Expected<double> Top5Overlap(const Tensor& ref, const Tensor& cand);

// Mean over samples of Kendall's tau-b between the reference's and the candidate's
// scores on the reference's top-k classes (k = min(5, C)); in -1..1, 1 = same order.
//   tau_b = (nc - nd) / sqrt((n0 - n1) * (n0 - n2)),  n0 = k(k-1)/2,
// nc / nd the concordant / discordant pairs, n1 / n2 the pairs tied (exactly equal)
// in the reference / candidate (a pair tied in both counts in n1 and n2, in neither
// nc nor nd), as scipy.stats.kendalltau (variant 'b') defines it. Where tau-b is
// undefined (a side whose k scores are all equal, or k = 1): 1 if both sides are
// entirely tied (neither expresses an order, so they agree), otherwise 0 (one side
// has an order the other lacks: no association).
Expected<double> KendallTauTop5(const Tensor& ref, const Tensor& cand);

// SQNR (dB) of the candidate's outputs against the reference's, all samples
// concatenated (SqnrDb above).
Expected<double> OutputSqnrDb(const Tensor& ref, const Tensor& cand);

// Mean over samples of KL(softmax(ref) || softmax(cand)) in nats, from a stable
// log-softmax (max subtracted). Terms where the reference probability is exactly 0
// contribute 0; per-sample values below 0 from rounding are clamped to 0, so
// identical outputs give exactly 0.
Expected<double> KlDivergence(const Tensor& ref, const Tensor& cand);

struct AgreementMetrics {
  int64_t samples = 0;
  int64_t classes = 0;
  double top1_disagreement = 0;  // percent, 0..100
  double top5_overlap = 0;       // 0..1
  double kendall_tau = 0;        // -1..1
  double sqnr_db = 0;            // dB
  double kl_divergence = 0;      // nats
};

// All agreement metrics at once, streaming. Every batch must have the same C, and
// ref and cand of a batch the same shape. Result() equals the whole-tensor functions
// on the concatenated batches exactly.
class AgreementAccumulator {
 public:
  Status Add(const Tensor& ref_batch, const Tensor& cand_batch);
  // Error if no sample was added.
  Expected<AgreementMetrics> Result() const;
  int64_t samples() const { return samples_; }

 private:
  int64_t samples_ = 0, classes_ = -1;
  int64_t top1_differ_ = 0;
  double overlap_sum_ = 0, tau_sum_ = 0, kl_sum_ = 0;
  SqnrAccumulator sqnr_;
};

// All agreement metrics of two whole tensors (one AgreementAccumulator batch). The
// single-metric functions above each compute this and pick their field; when more
// than one is needed, call this (or the accumulator) once.
Expected<AgreementMetrics> Agreement(const Tensor& ref, const Tensor& cand);

}  // namespace seqto
