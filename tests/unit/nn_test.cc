// The heavy float ops of ops/nn (Conv, ConvTranspose, Gemm, MatMul, pools): each
// fast (oneDNN) kernel against its reference on odd shapes. Fluent testers build
// the node, run both kernels (with the weights constant and not) and compare:
// max |fast - ref| <= 1e-4 * max |ref| + 1e-5.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <random>

#include "core/parallel.h"
#include "ops/registry.h"
#include "ops/util.h"
#include "support/test_models.h"

namespace seqto {
namespace {

using testing::Float;
using testing::Int;
using testing::Ints;
using testing::String;

// A kernel context over test tensors. Outputs start as NaN so that an element a
// kernel forgets to write shows up.
class TestContext final : public ops::KernelContext {
 public:
  TestContext(const std::vector<Tensor>& inputs, int num_outputs) {
    for (const Tensor& t : inputs) inputs_.push_back(t.defined() ? &t : nullptr);
    outputs_.resize(num_outputs);
    output_wanted_.assign(num_outputs, true);
  }
  Tensor& Allocate(int i, DType dtype, Shape shape) override {
    outputs_[i] = Tensor(dtype, std::move(shape));
    std::memset(outputs_[i].raw(), 0xff, outputs_[i].nbytes());
    return outputs_[i];
  }
  std::vector<Tensor>& outputs() { return outputs_; }
};

Tensor Random(Shape shape, uint32_t seed) {
  Tensor t(DType::kFloat32, std::move(shape));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

// Builds the kernel for `node` and runs it once (twice for the fast kernel, to use
// its cached plan). `constant[i]` marks inputs given to the factory as constants.
Expected<std::vector<Tensor>> RunNode(const ir::Node& node, int64_t opset, const std::vector<Tensor>& inputs,
                                      const std::vector<bool>& constant, bool reference_only, int num_outputs = 1) {
  const ops::OpDef* def = ops::OpRegistry::Global().Find(node.domain, node.op_type, opset);
  if (!def) return InternalError("no kernel for " + node.op_type);
  ops::KernelInit init{node, opset, {}, reference_only};
  for (size_t i = 0; i < inputs.size(); ++i)
    init.constant_inputs.push_back(i < constant.size() && constant[i] && inputs[i].defined() ? &inputs[i] : nullptr);
  SEQTO_ASSIGN_OR_RETURN(auto kernel, def->create(init));
  std::vector<Tensor> outputs;
  for (int run = 0; run < (reference_only ? 1 : 2); ++run) {
    TestContext ctx(inputs, num_outputs);
    SEQTO_RETURN_IF_ERROR(kernel->Run(ctx));
    outputs = ctx.outputs();
  }
  return outputs;
}

// Runs the reference and the fast kernel and compares their first outputs.
void ExpectFastMatchesReference(const ir::Node& node, const std::vector<Tensor>& inputs,
                                const std::vector<bool>& constant, const std::string& what, int64_t opset = 13) {
  SCOPED_TRACE(what);
  auto ref = RunNode(node, opset, inputs, constant, true);
  ASSERT_TRUE(ref.ok()) << ref.error().message;
  auto fast = RunNode(node, opset, inputs, constant, false);
  ASSERT_TRUE(fast.ok()) << fast.error().message;
  const Tensor& r = (*ref)[0];
  const Tensor& f = (*fast)[0];
  ASSERT_EQ(r.shape(), f.shape());
  ASSERT_GT(r.numel(), 0);
  double max_ref = 0, max_diff = 0;
  for (int64_t i = 0; i < r.numel(); ++i) {
    const float rv = r.data<float>()[i], fv = f.data<float>()[i];
    ASSERT_FALSE(std::isnan(rv)) << "reference left element " << i << " unwritten";
    ASSERT_FALSE(std::isnan(fv)) << "fast kernel left element " << i << " unwritten";
    max_ref = std::max(max_ref, std::fabs(static_cast<double>(rv)));
    max_diff = std::max(max_diff, std::fabs(static_cast<double>(rv) - fv));
  }
  EXPECT_LE(max_diff, 1e-4 * max_ref + 1e-5) << "output " << ShapeToString(r.shape()) << ", max |ref| " << max_ref;
}

std::string Join(const std::vector<int64_t>& v) {
  std::string s;
  for (int64_t x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return "[" + s + "]";
}

// Conv and ConvTranspose share the window parameters.
template <typename Self>
class WindowTester {
 public:
  Self& batch(int64_t n) { return set(batch_, n); }
  Self& input_size(std::vector<int64_t> s) { return set(input_size_, std::move(s)); }
  Self& kernel(std::vector<int64_t> k) { return set(kernel_, std::move(k)); }
  Self& strides(std::vector<int64_t> s) { return set(strides_, std::move(s)); }
  Self& dilations(std::vector<int64_t> d) { return set(dilations_, std::move(d)); }
  Self& pads(std::vector<int64_t> p) { return set(pads_, std::move(p)); }
  Self& auto_pad(std::string a) { return set(auto_pad_, std::move(a)); }

 protected:
  template <typename T, typename V>
  Self& set(T& field, V&& v) {
    field = std::forward<V>(v);
    return static_cast<Self&>(*this);
  }
  void AddWindowAttrs(ir::Node& node) const {
    if (!strides_.empty()) node.attributes["strides"] = Ints(strides_);
    if (!dilations_.empty()) node.attributes["dilations"] = Ints(dilations_);
    if (!pads_.empty()) node.attributes["pads"] = Ints(pads_);
    if (!auto_pad_.empty()) node.attributes["auto_pad"] = String(auto_pad_);
  }
  std::string Describe() const {
    return "N=" + std::to_string(batch_) + " in=" + Join(input_size_) + " k=" + Join(kernel_) + " s=" + Join(strides_) +
           " d=" + Join(dilations_) + " p=" + Join(pads_) + " " + auto_pad_;
  }
  int64_t batch_ = 1;
  std::vector<int64_t> input_size_{7, 9}, kernel_{3, 3}, strides_, dilations_, pads_;
  std::string auto_pad_;
};

class ConvTester : public WindowTester<ConvTester> {
 public:
  ConvTester& input_channels(int64_t c) { return set(cin_, c); }    // per group
  ConvTester& output_channels(int64_t m) { return set(cout_, m); }  // per group
  ConvTester& groups(int64_t g) { return set(groups_, g); }
  ConvTester& bias(bool b) { return set(bias_, b); }

  void Test() const {
    ir::Node node;
    node.name = "conv";
    node.op_type = "Conv";
    node.inputs = {"x", "w"};
    if (bias_) node.inputs.push_back("b");
    node.outputs = {"y"};
    AddWindowAttrs(node);
    if (groups_ != 1) node.attributes["group"] = Int(groups_);
    Shape x{batch_, cin_ * groups_};
    x.insert(x.end(), input_size_.begin(), input_size_.end());
    Shape w{cout_ * groups_, cin_};
    w.insert(w.end(), kernel_.begin(), kernel_.end());
    std::vector<Tensor> inputs{Random(x, 1), Random(w, 2)};
    if (bias_) inputs.push_back(Random({cout_ * groups_}, 3));
    const std::string what = "Conv " + Describe() + " cin/g=" + std::to_string(cin_) +
                             " cout/g=" + std::to_string(cout_) + " g=" + std::to_string(groups_);
    ExpectFastMatchesReference(node, inputs, {false, true, true}, what + " (constant W)");
    ExpectFastMatchesReference(node, inputs, {false, false, false}, what + " (W as input)");
  }

 private:
  int64_t cin_ = 3, cout_ = 5, groups_ = 1;
  bool bias_ = true;
};

class ConvTransposeTester : public WindowTester<ConvTransposeTester> {
 public:
  ConvTransposeTester& input_channels(int64_t c) { return set(cin_, c); }    // per group
  ConvTransposeTester& output_channels(int64_t m) { return set(cout_, m); }  // per group
  ConvTransposeTester& groups(int64_t g) { return set(groups_, g); }
  ConvTransposeTester& bias(bool b) { return set(bias_, b); }
  ConvTransposeTester& output_padding(std::vector<int64_t> p) { return set(output_padding_, std::move(p)); }
  ConvTransposeTester& output_shape(std::vector<int64_t> s) { return set(output_shape_, std::move(s)); }
  // com.seqto.ConvTranspose with channels_last = 1: X (and Y) N x spatial x C.
  ConvTransposeTester& channels_last(bool c) { return set(channels_last_, c); }

  void Test() const {
    ir::Node node;
    node.name = "convt";
    node.op_type = "ConvTranspose";
    if (channels_last_) {
      node.domain = "com.seqto";
      node.attributes["channels_last"] = Int(1);
    }
    node.inputs = {"x", "w"};
    if (bias_) node.inputs.push_back("b");
    node.outputs = {"y"};
    AddWindowAttrs(node);
    if (groups_ != 1) node.attributes["group"] = Int(groups_);
    if (!output_padding_.empty()) node.attributes["output_padding"] = Ints(output_padding_);
    if (!output_shape_.empty()) node.attributes["output_shape"] = Ints(output_shape_);
    Shape x{batch_, cin_ * groups_};
    x.insert(x.end(), input_size_.begin(), input_size_.end());
    if (channels_last_) x = ops::ChannelsLastShape(x);
    Shape w{cin_ * groups_, cout_};
    w.insert(w.end(), kernel_.begin(), kernel_.end());
    std::vector<Tensor> inputs{Random(x, 4), Random(w, 5)};
    if (bias_) inputs.push_back(Random({cout_ * groups_}, 6));
    const std::string what = "ConvTranspose " + Describe() + " cin/g=" + std::to_string(cin_) +
                             " cout/g=" + std::to_string(cout_) + " g=" + std::to_string(groups_) +
                             " out_pad=" + Join(output_padding_) + " out_shape=" + Join(output_shape_) +
                             (channels_last_ ? " channels_last" : "");
    ExpectFastMatchesReference(node, inputs, {false, true, true}, what + " (constant W)");
    ExpectFastMatchesReference(node, inputs, {false, false, false}, what + " (W as input)");
  }

 private:
  int64_t cin_ = 3, cout_ = 5, groups_ = 1;
  bool bias_ = true, channels_last_ = false;
  std::vector<int64_t> output_padding_, output_shape_;
};

class GemmTester {
 public:
  GemmTester& m(int64_t v) { return set(m_, v); }
  GemmTester& n(int64_t v) { return set(n_, v); }
  GemmTester& k(int64_t v) { return set(k_, v); }
  GemmTester& trans_a(bool v) { return set(trans_a_, v); }
  GemmTester& trans_b(bool v) { return set(trans_b_, v); }
  GemmTester& alpha(float v) { return set(alpha_, v); }
  GemmTester& beta(float v) { return set(beta_, v); }
  GemmTester& c_shape(std::optional<Shape> s) { return set(c_shape_, std::move(s)); }

  void Test() const {
    ir::Node node;
    node.name = "gemm";
    node.op_type = "Gemm";
    node.inputs = {"a", "b"};
    if (c_shape_) node.inputs.push_back("c");
    node.outputs = {"y"};
    if (trans_a_) node.attributes["transA"] = Int(1);
    if (trans_b_) node.attributes["transB"] = Int(1);
    if (alpha_ != 1.f) node.attributes["alpha"] = Float(alpha_);
    if (beta_ != 1.f) node.attributes["beta"] = Float(beta_);
    std::vector<Tensor> inputs{Random(trans_a_ ? Shape{k_, m_} : Shape{m_, k_}, 7),
                               Random(trans_b_ ? Shape{n_, k_} : Shape{k_, n_}, 8)};
    if (c_shape_) inputs.push_back(Random(*c_shape_, 9));
    const std::string what = "Gemm M=" + std::to_string(m_) + " N=" + std::to_string(n_) + " K=" + std::to_string(k_) +
                             " tA=" + std::to_string(trans_a_) + " tB=" + std::to_string(trans_b_) +
                             " alpha=" + std::to_string(alpha_) + " beta=" + std::to_string(beta_) +
                             " C=" + (c_shape_ ? ShapeToString(*c_shape_) : "none");
    ExpectFastMatchesReference(node, inputs, {false, true, true}, what + " (constant B, C)");
    ExpectFastMatchesReference(node, inputs, {false, false, false}, what + " (B, C as inputs)");
  }

 private:
  template <typename T, typename V>
  GemmTester& set(T& field, V&& v) {
    field = std::forward<V>(v);
    return *this;
  }
  int64_t m_ = 5, n_ = 7, k_ = 9;
  bool trans_a_ = false, trans_b_ = false;
  float alpha_ = 1.f, beta_ = 1.f;
  std::optional<Shape> c_shape_;
};

class MatMulTester {
 public:
  MatMulTester& a(Shape s) { return set(a_, std::move(s)); }
  MatMulTester& b(Shape s) { return set(b_, std::move(s)); }

  void Test() const {
    ir::Node node;
    node.name = "matmul";
    node.op_type = "MatMul";
    node.inputs = {"a", "b"};
    node.outputs = {"y"};
    std::vector<Tensor> inputs{Random(a_, 10), Random(b_, 11)};
    const std::string what = "MatMul " + ShapeToString(a_) + " x " + ShapeToString(b_);
    ExpectFastMatchesReference(node, inputs, {false, true}, what + " (constant B)");
    ExpectFastMatchesReference(node, inputs, {false, false}, what + " (B as input)");
  }

 private:
  template <typename T, typename V>
  MatMulTester& set(T& field, V&& v) {
    field = std::forward<V>(v);
    return *this;
  }
  Shape a_{3, 4}, b_{4, 5};
};

class PoolTester : public WindowTester<PoolTester> {
 public:
  explicit PoolTester(std::string op) : op_(std::move(op)) {}
  PoolTester& channels(int64_t c) { return set(channels_, c); }
  PoolTester& ceil_mode(bool v) { return set(ceil_mode_, v); }
  PoolTester& count_include_pad(bool v) { return set(count_include_pad_, v); }

  void Test() const {
    ir::Node node;
    node.name = "pool";
    node.op_type = op_;
    node.inputs = {"x"};
    node.outputs = {"y"};
    if (op_ == "MaxPool" || op_ == "AveragePool") {
      node.attributes["kernel_shape"] = Ints(kernel_);
      AddWindowAttrs(node);
      if (ceil_mode_) node.attributes["ceil_mode"] = Int(1);
      if (count_include_pad_) node.attributes["count_include_pad"] = Int(1);
    }
    Shape x{batch_, channels_};
    x.insert(x.end(), input_size_.begin(), input_size_.end());
    const std::string what = op_ + " " + Describe() + " C=" + std::to_string(channels_) +
                             " ceil=" + std::to_string(ceil_mode_) +
                             " include_pad=" + std::to_string(count_include_pad_);
    ExpectFastMatchesReference(node, {Random(x, 12)}, {false}, what);
  }

 private:
  std::string op_;
  int64_t channels_ = 5;
  bool ceil_mode_ = false, count_include_pad_ = false;
};

class NnTest : public ::testing::Test {
 protected:
  void SetUp() override { SetNumThreads(2); }
};

TEST_F(NnTest, ConvKernelSizes) {
  for (int64_t k : {1, 3, 5, 7}) {
    ConvTester().input_channels(5).output_channels(7).input_size({11, 9}).kernel({k, k}).Test();
    ConvTester().input_channels(3).output_channels(17).input_size({13, 12}).kernel({k, k}).strides({2, 2}).Test();
  }
}

TEST_F(NnTest, ConvPadsStridesDilations) {
  ConvTester()
      .batch(3)
      .input_channels(7)
      .output_channels(5)
      .input_size({10, 13})
      .kernel({3, 3})
      .pads({1, 1, 1, 1})
      .Test();
  ConvTester().input_channels(6).output_channels(9).input_size({12, 11}).kernel({3, 5}).pads({0, 2, 1, 1}).Test();
  ConvTester().input_channels(4).output_channels(3).input_size({15, 14}).kernel({3, 3}).dilations({2, 3}).Test();
  ConvTester()
      .batch(3)
      .input_channels(5)
      .output_channels(11)
      .input_size({17, 10})
      .kernel({5, 3})
      .strides({2, 3})
      .dilations({2, 1})
      .pads({2, 1, 0, 3})
      .Test();
  ConvTester()
      .input_channels(3)
      .output_channels(5)
      .input_size({9, 10})
      .kernel({3, 3})
      .strides({2, 2})
      .auto_pad("SAME_UPPER")
      .Test();
  ConvTester()
      .input_channels(3)
      .output_channels(5)
      .input_size({9, 10})
      .kernel({4, 4})
      .strides({2, 1})
      .auto_pad("SAME_LOWER")
      .Test();
  ConvTester().input_channels(3).output_channels(5).input_size({9, 10}).kernel({3, 2}).auto_pad("VALID").Test();
  ConvTester().input_channels(9).output_channels(3).input_size({8, 8}).kernel({3, 3}).bias(false).Test();
}

TEST_F(NnTest, ConvGroupsAndDepthwise) {
  ConvTester().groups(3).input_channels(5).output_channels(7).input_size({9, 11}).kernel({3, 3}).Test();
  ConvTester().groups(2).input_channels(4).output_channels(6).input_size({10, 7}).kernel({1, 1}).Test();
  ConvTester()
      .batch(3)
      .groups(17)
      .input_channels(1)
      .output_channels(1)
      .input_size({13, 11})
      .kernel({3, 3})
      .pads({1, 1, 1, 1})
      .Test();
  ConvTester()
      .groups(33)
      .input_channels(1)
      .output_channels(1)
      .input_size({14, 14})
      .kernel({3, 3})
      .strides({2, 2})
      .pads({1, 1, 1, 1})
      .Test();
  ConvTester()
      .groups(5)
      .input_channels(1)
      .output_channels(3)
      .input_size({9, 9})
      .kernel({5, 5})
      .dilations({2, 2})
      .pads({2, 2, 2, 2})
      .Test();  // depthwise with a channel multiplier
}

TEST_F(NnTest, Conv1dAnd3d) {
  ConvTester()
      .batch(3)
      .input_channels(5)
      .output_channels(7)
      .input_size({19})
      .kernel({3})
      .strides({2})
      .pads({1, 2})
      .Test();
  ConvTester().groups(3).input_channels(2).output_channels(3).input_size({21}).kernel({5}).dilations({3}).Test();
  ConvTester()
      .input_channels(3)
      .output_channels(5)
      .input_size({5, 6, 7})
      .kernel({3, 3, 3})
      .pads({1, 0, 1, 1, 2, 0})
      .Test();
  ConvTester()
      .batch(3)
      .groups(2)
      .input_channels(3)
      .output_channels(2)
      .input_size({7, 5, 6})
      .kernel({2, 3, 1})
      .strides({2, 1, 2})
      .dilations({1, 2, 1})
      .Test();
}

TEST_F(NnTest, ConvWideChannels) {  // blocked-layout paths (multiples of 16 and not)
  ConvTester().input_channels(64).output_channels(64).input_size({14, 14}).kernel({3, 3}).pads({1, 1, 1, 1}).Test();
  ConvTester().batch(3).input_channels(35).output_channels(67).input_size({9, 10}).kernel({1, 1}).Test();
  ConvTester()
      .input_channels(48)
      .output_channels(32)
      .input_size({15, 15})
      .kernel({3, 3})
      .strides({2, 2})
      .pads({1, 1, 1, 1})
      .Test();
}

// Kernel == stride, no padding (the upsampling of detection heads): the matmul and
// block copy path, channels-first and channels-last, against the reference, with the
// one-channel output of a text detector and batches; and the oneDNN deconvolution on
// channels-last tensors where the blocks overlap.
TEST_F(NnTest, ConvTransposeSeparateBlocksAndChannelsLast) {
  for (bool last : {false, true})
    for (int64_t m : {1, 3, 24})
      for (bool bias : {false, true}) {
        ConvTransposeTester()
            .channels_last(last)
            .batch(2)
            .input_channels(24)
            .output_channels(m)
            .input_size({5, 7})
            .kernel({2, 2})
            .strides({2, 2})
            .bias(bias)
            .Test();
      }
  ConvTransposeTester()
      .channels_last(true)
      .input_channels(5)
      .output_channels(3)
      .input_size({4, 3})
      .kernel({3, 2})
      .strides({3, 2})
      .Test();
  ConvTransposeTester()
      .channels_last(true)
      .batch(2)
      .input_channels(8)
      .output_channels(16)
      .input_size({5, 6})
      .kernel({3, 3})
      .strides({2, 2})
      .pads({1, 1, 1, 1})
      .output_padding({1, 1})
      .Test();
  ConvTransposeTester()
      .channels_last(true)
      .groups(2)
      .input_channels(3)
      .output_channels(2)
      .input_size({4, 5})
      .kernel({2, 2})
      .strides({2, 2})
      .Test();
}

TEST_F(NnTest, ConvTranspose) {
  ConvTransposeTester().input_channels(3).output_channels(5).input_size({5, 6}).kernel({3, 3}).Test();
  ConvTransposeTester()
      .batch(3)
      .input_channels(5)
      .output_channels(3)
      .input_size({7, 4})
      .kernel({3, 2})
      .strides({2, 3})
      .pads({1, 0, 0, 1})
      .Test();
  ConvTransposeTester()
      .input_channels(4)
      .output_channels(7)
      .input_size({5, 5})
      .kernel({3, 3})
      .strides({2, 2})
      .output_padding({1, 1})
      .Test();
  ConvTransposeTester()
      .input_channels(4)
      .output_channels(2)
      .input_size({6, 5})
      .kernel({3, 3})
      .strides({2, 2})
      .dilations({2, 1})
      .pads({1, 1, 1, 1})
      .Test();
  ConvTransposeTester()
      .groups(3)
      .input_channels(2)
      .output_channels(3)
      .input_size({5, 7})
      .kernel({3, 3})
      .strides({2, 2})
      .Test();
  ConvTransposeTester()
      .groups(8)
      .input_channels(1)
      .output_channels(1)
      .input_size({6, 6})
      .kernel({4, 4})
      .strides({2, 2})
      .pads({1, 1, 1, 1})
      .bias(false)
      .Test();
  ConvTransposeTester()
      .input_channels(3)
      .output_channels(2)
      .input_size({4, 5})
      .kernel({3, 3})
      .strides({3, 2})
      .output_shape({13, 11})
      .Test();
  ConvTransposeTester()
      .input_channels(3)
      .output_channels(2)
      .input_size({4, 5})
      .kernel({3, 3})
      .strides({2, 2})
      .auto_pad("SAME_UPPER")
      .Test();
  ConvTransposeTester()
      .input_channels(3)
      .output_channels(2)
      .input_size({4, 5})
      .kernel({4, 3})
      .strides({2, 2})
      .auto_pad("SAME_LOWER")
      .Test();
  ConvTransposeTester().batch(3).input_channels(3).output_channels(5).input_size({9}).kernel({5}).strides({2}).Test();
  ConvTransposeTester()
      .input_channels(2)
      .output_channels(3)
      .input_size({3, 4, 5})
      .kernel({3, 2, 3})
      .strides({1, 2, 2})
      .pads({1, 0, 1, 0, 1, 0})
      .Test();
}

TEST_F(NnTest, Gemm) {
  GemmTester().Test();
  GemmTester().m(1).n(1000).k(2048).c_shape(Shape{1000}).Test();  // a classifier layer
  GemmTester().m(3).n(17).k(33).trans_b(true).c_shape(Shape{17}).Test();
  GemmTester().m(6).n(5).k(7).trans_a(true).c_shape(Shape{6, 1}).Test();
  GemmTester().m(6).n(5).k(7).trans_a(true).trans_b(true).alpha(0.5f).beta(-2.f).c_shape(Shape{6, 5}).Test();
  GemmTester().m(4).n(9).k(3).alpha(2.f).beta(0.25f).c_shape(Shape{}).Test();
  GemmTester().m(4).n(9).k(3).beta(0.f).c_shape(Shape{1, 9}).Test();
  GemmTester().m(33).n(65).k(31).alpha(-1.f).Test();
}

TEST_F(NnTest, MatMul) {
  MatMulTester().a({3, 4}).b({4, 5}).Test();
  MatMulTester().a({7}).b({7, 3}).Test();
  MatMulTester().a({2, 3, 7}).b({7}).Test();
  MatMulTester().a({9}).b({9}).Test();
  MatMulTester().a({2, 3, 5, 7}).b({7, 6}).Test();     // batch folded into rows
  MatMulTester().a({3, 5, 7}).b({3, 7, 6}).Test();     // batched
  MatMulTester().a({2, 1, 5, 7}).b({3, 7, 6}).Test();  // both broadcast
  MatMulTester().a({5, 7}).b({4, 7, 3}).Test();        // A broadcast
  MatMulTester().a({1, 33, 65}).b({65, 17}).Test();
}

TEST_F(NnTest, MaxPool) {
  PoolTester("MaxPool").input_size({9, 11}).kernel({3, 3}).Test();
  PoolTester("MaxPool")
      .batch(3)
      .channels(17)
      .input_size({12, 11})
      .kernel({3, 3})
      .strides({2, 2})
      .pads({1, 1, 1, 1})
      .Test();
  PoolTester("MaxPool").input_size({10, 9}).kernel({2, 3}).strides({2, 2}).ceil_mode(true).Test();
  PoolTester("MaxPool").input_size({10, 12}).kernel({3, 2}).strides({2, 2}).ceil_mode(true).Test();  // past pad_end
  PoolTester("MaxPool").input_size({13, 12}).kernel({3, 2}).dilations({2, 3}).pads({1, 0, 2, 1}).Test();
  PoolTester("MaxPool").input_size({13, 12}).kernel({3, 3}).strides({2, 2}).auto_pad("SAME_UPPER").Test();
  PoolTester("MaxPool").input_size({13, 12}).kernel({4, 4}).strides({3, 3}).auto_pad("SAME_LOWER").Test();
  PoolTester("MaxPool").batch(3).input_size({20}).kernel({3}).strides({2}).Test();
  PoolTester("MaxPool").input_size({6, 7, 5}).kernel({2, 3, 2}).strides({2, 1, 2}).pads({0, 1, 0, 1, 1, 1}).Test();
}

TEST_F(NnTest, AveragePool) {
  for (bool include : {false, true}) {
    PoolTester("AveragePool").input_size({9, 11}).kernel({3, 3}).count_include_pad(include).Test();
    PoolTester("AveragePool")
        .batch(3)
        .channels(17)
        .input_size({12, 11})
        .kernel({3, 3})
        .strides({2, 2})
        .pads({1, 1, 1, 1})
        .count_include_pad(include)
        .Test();
    PoolTester("AveragePool")
        .input_size({10, 9})
        .kernel({3, 2})
        .strides({2, 2})
        .pads({1, 0, 0, 1})
        .ceil_mode(true)
        .count_include_pad(include)
        .Test();
    PoolTester("AveragePool")
        .input_size({10, 12})
        .kernel({3, 2})
        .strides({2, 2})
        .ceil_mode(true)
        .count_include_pad(include)
        .Test();  // windows past pad_end
    PoolTester("AveragePool")
        .input_size({11, 12})
        .kernel({3, 3})
        .strides({2, 2})
        .auto_pad("SAME_UPPER")
        .count_include_pad(include)
        .Test();
    PoolTester("AveragePool")
        .batch(3)
        .input_size({20})
        .kernel({4})
        .strides({3})
        .pads({1, 2})
        .count_include_pad(include)
        .Test();
    PoolTester("AveragePool")
        .input_size({6, 7, 5})
        .kernel({2, 3, 2})
        .pads({1, 1, 0, 0, 1, 1})
        .count_include_pad(include)
        .Test();
  }
}

TEST_F(NnTest, GlobalPools) {
  for (const char* op : {"GlobalAveragePool", "GlobalMaxPool"}) {
    PoolTester(op).batch(3).channels(7).input_size({7, 9}).Test();
    PoolTester(op).channels(1280).input_size({7, 7}).Test();
    PoolTester(op).channels(5).input_size({13}).Test();
    PoolTester(op).channels(5).input_size({3, 4, 5}).Test();
  }
}

TEST_F(NnTest, BadInputsAreUserErrors) {
  ir::Node node;
  node.name = "conv";
  node.op_type = "Conv";
  node.inputs = {"x", "w"};
  node.outputs = {"y"};
  // W's input channels (4) do not match X's (3).
  auto r = RunNode(node, 13, {Random({1, 3, 5, 5}, 1), Random({2, 4, 3, 3}, 2)}, {false, true}, false);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().kind, ErrorKind::kUser);
  EXPECT_NE(r.error().message.find("W has shape 2x4x3x3"), std::string::npos) << r.error().message;

  node.attributes["auto_pad"] = String("SAME");
  r = RunNode(node, 13, {Random({1, 3, 5, 5}, 1), Random({2, 3, 3, 3}, 2)}, {false, true}, false);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("auto_pad"), std::string::npos) << r.error().message;

  ir::Node gemm;
  gemm.name = "gemm";
  gemm.op_type = "Gemm";
  gemm.inputs = {"a", "b"};
  gemm.outputs = {"y"};
  r = RunNode(gemm, 13, {Random({2, 3}, 1), Random({4, 5}, 2)}, {false, false}, false);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().kind, ErrorKind::kUser);

  ir::Node pool;
  pool.name = "pool";
  pool.op_type = "MaxPool";
  pool.inputs = {"x"};
  pool.outputs = {"y"};
  r = RunNode(pool, 13, {Random({1, 3, 5, 5}, 1)}, {false}, false);  // no kernel_shape
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("kernel_shape"), std::string::npos) << r.error().message;
}

TEST_F(NnTest, MaxPoolIndices) {
  ir::Node node;
  node.name = "pool";
  node.op_type = "MaxPool";
  node.inputs = {"x"};
  node.outputs = {"y", "i"};
  node.attributes["kernel_shape"] = Ints({2, 2});
  node.attributes["strides"] = Ints({2, 2});
  // Two channels of 2x4; maxima at (1,0)/(0,3) and (0,1)/(1,2).
  Tensor x = Tensor::FromVector<float>({1, 2, 2, 4}, {0, 0, 0, 9, 5, 0, 0, 0,  //
                                                      0, 7, 0, 0, 0, 0, 8, 0});
  for (int order : {0, 1}) {
    node.attributes["storage_order"] = Int(order);
    auto r = RunNode(node, 12, {x}, {false}, false, 2);
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ((*r)[0].ToDoubles(), (std::vector<double>{5, 9, 7, 8}));
    const std::vector<int64_t> row_major{4, 3, 9, 14}, col_major{1, 6, 10, 13};
    EXPECT_EQ((*r)[1].ToInt64s(), order == 0 ? row_major : col_major);
  }
}

}  // namespace
}  // namespace seqto
