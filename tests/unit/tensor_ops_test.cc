// Tensor-manipulation ops (src/ops/tensor/): what ONNX's backend tests cover poorly —
// odd shapes, negative axes, every element size, aliasing, fast kernels against the
// reference ones, and bad inputs that must give an error rather than a crash.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "ops/tensor/tensor_common.h"
#include "runtime/session.h"

namespace seqto {
namespace {

using Attrs = std::map<std::string, ir::Attribute>;

ir::Attribute AInt(int64_t v) {
  ir::Attribute a;
  a.type = ir::Attribute::Type::kInt;
  a.i = v;
  return a;
}
ir::Attribute AInts(std::vector<int64_t> v) {
  ir::Attribute a;
  a.type = ir::Attribute::Type::kInts;
  a.ints = std::move(v);
  return a;
}
ir::Attribute AFloat(float v) {
  ir::Attribute a;
  a.type = ir::Attribute::Type::kFloat;
  a.f = v;
  return a;
}
ir::Attribute AFloats(std::vector<float> v) {
  ir::Attribute a;
  a.type = ir::Attribute::Type::kFloats;
  a.floats = std::move(v);
  return a;
}
ir::Attribute AString(std::string v) {
  ir::Attribute a;
  a.type = ir::Attribute::Type::kString;
  a.s = std::move(v);
  return a;
}
ir::Attribute ATensor(Tensor t) {
  ir::Attribute a;
  a.type = ir::Attribute::Type::kTensor;
  a.t = std::move(t);
  return a;
}

ir::ValueInfo Info(const std::string& name, DType dtype) {
  ir::ValueInfo v;
  v.name = name;
  v.dtype = dtype;
  return v;
}

// Runs one node. Inputs are graph inputs (an undefined Tensor marks an omitted
// optional input); with `constant_inputs` they are initializers instead, so the
// node is folded when the session is created.
struct OpRun {
  std::string op;
  int64_t opset = 13;
  Attrs attrs;
  std::vector<Tensor> inputs;
  int outputs = 1;
  bool reference_only = false;
  bool constant_inputs = false;

  Expected<std::vector<Tensor>> Run() const {
    ir::Model m;
    m.opsets[""] = opset;
    ir::Node n;
    n.name = "node";
    n.op_type = op;
    n.attributes = attrs;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!inputs[i].defined()) {
        n.inputs.push_back("");
        continue;
      }
      const std::string name = "in" + std::to_string(i);
      n.inputs.push_back(name);
      if (constant_inputs)
        m.graph.initializers[name] = inputs[i];
      else
        m.graph.inputs.push_back(Info(name, inputs[i].dtype()));
    }
    for (int i = 0; i < outputs; ++i) {
      n.outputs.push_back("out" + std::to_string(i));
      m.graph.outputs.push_back(Info("out" + std::to_string(i), DType::kUndefined));
    }
    m.graph.nodes.push_back(n);
    runtime::SessionOptions options;
    options.reference_only = reference_only;
    SEQTO_ASSIGN_OR_RETURN(auto session, runtime::Session::Create(m, options));
    runtime::TensorMap feed;
    if (!constant_inputs)
      for (size_t i = 0; i < inputs.size(); ++i)
        if (inputs[i].defined()) feed["in" + std::to_string(i)] = inputs[i];
    SEQTO_ASSIGN_OR_RETURN(runtime::TensorMap result, session->Run(feed));
    std::vector<Tensor> out;
    for (int i = 0; i < outputs; ++i) out.push_back(result.at("out" + std::to_string(i)));
    return out;
  }
  // The single output; fails the test on an error.
  Tensor Out() const {
    auto r = Run();
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
    return r.ok() ? (*r)[0] : Tensor();
  }
  // The error message; fails the test if the op succeeds.
  std::string Error() const {
    auto r = Run();
    EXPECT_FALSE(r.ok()) << op << " succeeded but should have failed";
    return r.ok() ? "" : r.error().message;
  }
};

Tensor F32(Shape shape, std::vector<float> v) { return Tensor::FromVector<float>(std::move(shape), v); }
Tensor I64(Shape shape, std::vector<int64_t> v) { return Tensor::FromVector<int64_t>(std::move(shape), v); }
Tensor I64s(std::vector<int64_t> v) {
  const auto n = static_cast<int64_t>(v.size());
  return Tensor::FromVector<int64_t>({n}, v);
}

Tensor Iota(DType dtype, Shape shape) {
  Tensor t(dtype, std::move(shape));
  const int64_t n = t.numel();
  switch (dtype) {
    case DType::kUInt8:
      for (int64_t i = 0; i < n; ++i) t.data<uint8_t>()[i] = static_cast<uint8_t>(i * 7 + 1);
      break;
    case DType::kFloat16:
      for (int64_t i = 0; i < n; ++i) t.data<uint16_t>()[i] = static_cast<uint16_t>(i * 31 + 3);
      break;
    case DType::kFloat32:
      for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = static_cast<float>(i) * 0.5f - 3.f;
      break;
    case DType::kInt64:
      for (int64_t i = 0; i < n; ++i) t.data<int64_t>()[i] = i * 1000003 - 17;
      break;
    default:
      ADD_FAILURE() << "Iota: unsupported type";
  }
  return t;
}

std::vector<double> Values(const Tensor& t) { return t.ToDoubles(); }

bool SameBytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// ---------------------------------------------------------------- StridedCopy

TEST(StridedCopy, MatchesReferenceOnRandomViews) {
  std::mt19937 rng(3);
  for (int iter = 0; iter < 300; ++iter) {
    const int rank = 1 + static_cast<int>(rng() % 5);
    Shape shape(rank);
    for (auto& d : shape) d = 1 + static_cast<int64_t>(rng() % 9);
    if (iter % 10 == 0) shape[rng() % rank] = 40 + rng() % 30;  // big enough to tile
    // A random permutation of a contiguous source, some dims broadcast or reversed.
    std::vector<int64_t> perm(rank);
    for (int i = 0; i < rank; ++i) perm[i] = i;
    std::shuffle(perm.begin(), perm.end(), rng);
    Shape src_shape(rank);
    for (int i = 0; i < rank; ++i) src_shape[perm[i]] = shape[i];
    const auto src_strides = ContiguousStrides(src_shape);
    std::vector<int64_t> strides(rank);
    int64_t base = 0;
    for (int i = 0; i < rank; ++i) {
      strides[i] = src_strides[perm[i]];
      const int kind = static_cast<int>(rng() % 6);
      if (kind == 0) strides[i] = 0;
      if (kind == 1) {  // reversed
        base += (shape[i] - 1) * strides[i];
        strides[i] = -strides[i];
      }
    }
    for (size_t es : {1, 2, 4, 8}) {
      std::vector<uint8_t> src(static_cast<size_t>(NumElements(src_shape)) * es);
      for (auto& b : src) b = static_cast<uint8_t>(rng());
      std::vector<uint8_t> fast(NumElements(shape) * es), ref(NumElements(shape) * es);
      const uint8_t* start = src.data() + base * static_cast<int64_t>(es);
      ops::tensorops::StridedCopy(start, fast.data(), shape, strides, es);
      ops::tensorops::StridedCopyReference(start, ref.data(), shape, strides, es);
      ASSERT_EQ(fast, ref) << "shape " << ShapeToString(shape) << " element size " << es;
    }
  }
}

// ---------------------------------------------------------------- Reshape family

TEST(Reshape, ZeroCopiesAndMinusOneInfers) {
  Tensor x = Iota(DType::kFloat32, {2, 3, 4});
  Tensor y = OpRun{"Reshape", 14, {}, {x, I64s({0, -1})}}.Out();
  EXPECT_EQ(y.shape(), (Shape{2, 12}));
  EXPECT_EQ(y.storage(), x.storage()) << "Reshape should alias its input";
  EXPECT_EQ((OpRun{"Reshape", 14, {}, {x, I64s({-1, 0, 2})}}.Out().shape()), (Shape{4, 3, 2}));
  // allowzero: 0 is a real extent.
  Tensor empty(DType::kFloat32, {0, 3});
  EXPECT_EQ((OpRun{"Reshape", 14, {{"allowzero", AInt(1)}}, {empty, I64s({3, 0})}}.Out().shape()), (Shape{3, 0}));
  EXPECT_EQ((OpRun{"Reshape", 14, {}, {empty, I64s({-1, 3})}}.Out().shape()), (Shape{0, 3}));
}

TEST(Reshape, BadShapesAreErrors) {
  Tensor x = Iota(DType::kFloat32, {2, 3});
  EXPECT_NE((OpRun{"Reshape", 14, {}, {x, I64s({-1, -1})}}.Error().find("more than one -1")), std::string::npos);
  EXPECT_NE((OpRun{"Reshape", 14, {}, {x, I64s({4, 2})}}.Error().find("cannot reshape")), std::string::npos);
  EXPECT_NE((OpRun{"Reshape", 14, {}, {x, I64s({-1, 4})}}.Error().find("cannot reshape")), std::string::npos);
  EXPECT_NE((OpRun{"Reshape", 14, {}, {x, I64s({0, 0, 0})}}.Error().find("copies dim 2")), std::string::npos);
  EXPECT_NE((OpRun{"Reshape", 14, {}, {x, I64s({-2, -3})}}.Error().find("negative")), std::string::npos);
  EXPECT_FALSE((OpRun{"Reshape", 14, {{"allowzero", AInt(1)}}, {x, I64s({0, -1})}}.Run().ok()));
  EXPECT_NE((OpRun{"Reshape", 14, {}, {x, F32({2}, {1, 6})}}.Error().find("int64")), std::string::npos);
}

TEST(Reshape, Opset1TakesTheShapeAttribute) {
  Tensor x = Iota(DType::kFloat32, {2, 3});
  EXPECT_EQ((OpRun{"Reshape", 1, {{"shape", AInts({3, -1})}}, {x}}.Out().shape()), (Shape{3, 2}));
}

TEST(Flatten, AxisRangeIncludesRankAndNegatives) {
  Tensor x = Iota(DType::kInt64, {2, 3, 4});
  EXPECT_EQ((OpRun{"Flatten", 13, {{"axis", AInt(3)}}, {x}}.Out().shape()), (Shape{24, 1}));
  EXPECT_EQ((OpRun{"Flatten", 13, {{"axis", AInt(0)}}, {x}}.Out().shape()), (Shape{1, 24}));
  EXPECT_EQ((OpRun{"Flatten", 13, {{"axis", AInt(-3)}}, {x}}.Out().shape()), (Shape{1, 24}));
  Tensor y = OpRun{"Flatten", 13, {{"axis", AInt(-1)}}, {x}}.Out();
  EXPECT_EQ(y.shape(), (Shape{6, 4}));
  EXPECT_EQ(y.storage(), x.storage());
  EXPECT_FALSE((OpRun{"Flatten", 13, {{"axis", AInt(4)}}, {x}}.Run().ok()));
  EXPECT_FALSE((OpRun{"Flatten", 13, {{"axis", AInt(-4)}}, {x}}.Run().ok()));
}

TEST(Squeeze, AxesFromAttributeOrInput) {
  Tensor x = Iota(DType::kFloat32, {1, 3, 1, 2, 1});
  EXPECT_EQ((OpRun{"Squeeze", 13, {}, {x}}.Out().shape()), (Shape{3, 2}));
  EXPECT_EQ((OpRun{"Squeeze", 13, {}, {x, I64s({-1, 0})}}.Out().shape()), (Shape{3, 1, 2}));
  EXPECT_EQ((OpRun{"Squeeze", 11, {{"axes", AInts({2})}}, {x}}.Out().shape()), (Shape{1, 3, 2, 1}));
  Tensor y = OpRun{"Squeeze", 13, {}, {x, I64s({2})}}.Out();
  EXPECT_EQ(y.storage(), x.storage());
  EXPECT_NE((OpRun{"Squeeze", 13, {}, {x, I64s({1})}}.Error().find("extent is not 1")), std::string::npos);
  EXPECT_NE((OpRun{"Squeeze", 13, {}, {x, I64s({5})}}.Error().find("out of range")), std::string::npos);
  EXPECT_NE((OpRun{"Squeeze", 13, {}, {x, I64s({0, -5})}}.Error().find("repeated")), std::string::npos);
}

TEST(Unsqueeze, AxesRefertoTheOutputRank) {
  Tensor x = Iota(DType::kFloat32, {3, 4});
  EXPECT_EQ((OpRun{"Unsqueeze", 13, {}, {x, I64s({-1, 0})}}.Out().shape()), (Shape{1, 3, 4, 1}));
  EXPECT_EQ((OpRun{"Unsqueeze", 13, {}, {x, I64s({3, 1})}}.Out().shape()), (Shape{3, 1, 4, 1}));
  EXPECT_EQ((OpRun{"Unsqueeze", 11, {{"axes", AInts({0})}}, {x}}.Out().shape()), (Shape{1, 3, 4}));
  EXPECT_EQ((OpRun{"Unsqueeze", 13, {}, {Tensor::Scalar<float>(2.f), I64s({0})}}.Out().shape()), (Shape{1}));
  EXPECT_FALSE((OpRun{"Unsqueeze", 13, {}, {x, I64s({4})}}.Run().ok()));
  EXPECT_FALSE((OpRun{"Unsqueeze", 13, {}, {x, I64s({1, 1})}}.Run().ok()));
  EXPECT_FALSE((OpRun{"Unsqueeze", 13, {}, {x}}.Run().ok()));
  EXPECT_FALSE((OpRun{"Unsqueeze", 11, {}, {x}}.Run().ok()));
}

TEST(Identity, AliasesItsInput) {
  Tensor x = Iota(DType::kUInt8, {5});
  EXPECT_EQ((OpRun{"Identity", 13, {}, {x}}.Out().storage()), x.storage());
}

TEST(Dropout, InferenceIsIdentityWithAnAllTrueMask) {
  Tensor x = Iota(DType::kFloat32, {2, 3});
  auto r = OpRun{"Dropout", 13, {}, {x, Tensor::Scalar<float>(0.3f)}, 2}.Run();
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ((*r)[0].storage(), x.storage());
  EXPECT_EQ((*r)[1].dtype(), DType::kBool);
  EXPECT_EQ(Values((*r)[1]), std::vector<double>(6, 1.0));
  // Opset 7: the mask has the input's type.
  auto old = OpRun{"Dropout", 7, {{"ratio", AFloat(0.2f)}}, {x}, 2}.Run();
  ASSERT_TRUE(old.ok()) << old.error().message;
  EXPECT_EQ((*old)[1].dtype(), DType::kFloat32);
  EXPECT_FALSE((OpRun{"Dropout", 13, {}, {x, Tensor::Scalar<float>(1.5f)}}.Run().ok()));
}

TEST(Dropout, TrainingModeIsSeededAndScales) {
  Tensor x = Iota(DType::kFloat32, {100});
  OpRun run{"Dropout", 13, {{"seed", AInt(5)}}, {x, Tensor::Scalar<float>(0.5f), Tensor::Scalar<bool>(true)}, 2};
  auto a = run.Run(), b = run.Run();
  ASSERT_TRUE(a.ok()) << a.error().message;
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(SameBytes((*a)[0], (*b)[0]));
  int kept = 0;
  for (int64_t i = 0; i < 100; ++i) {
    const bool keep = (*a)[1].data<bool>()[i];
    kept += keep;
    EXPECT_FLOAT_EQ((*a)[0].data<float>()[i], keep ? x.data<float>()[i] * 2 : 0.f);
  }
  EXPECT_GT(kept, 25);
  EXPECT_LT(kept, 75);
}

// ---------------------------------------------------------------- Transpose

TEST(Transpose, FastMatchesReferenceForAllElementSizes) {
  std::mt19937 rng(11);
  const std::vector<Shape> shapes = {{7}, {3, 5}, {1, 67, 33}, {2, 3, 37, 41}, {5, 1, 4, 1, 3}, {2, 130, 70}};
  for (DType dt : {DType::kUInt8, DType::kFloat16, DType::kFloat32, DType::kInt64}) {
    for (const Shape& shape : shapes) {
      std::vector<int64_t> perm(shape.size());
      for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int64_t>(i);
      for (int trial = 0; trial < 4; ++trial) {
        std::shuffle(perm.begin(), perm.end(), rng);
        Tensor x = Iota(dt, shape);
        Tensor fast = OpRun{"Transpose", 13, {{"perm", AInts(perm)}}, {x}}.Out();
        Tensor ref = OpRun{"Transpose", 13, {{"perm", AInts(perm)}}, {x}, 1, true}.Out();
        ASSERT_TRUE(SameBytes(fast, ref)) << ShapeToString(shape) << " " << DTypeName(dt);
        // Spot-check against the definition.
        const auto in_strides = ContiguousStrides(shape);
        const auto out_strides = ContiguousStrides(fast.shape());
        const size_t es = DTypeSize(dt);
        const auto* xb = static_cast<const uint8_t*>(x.raw());
        const auto* yb = static_cast<const uint8_t*>(fast.raw());
        for (int64_t k = 0; k < fast.numel(); k += 97) {
          int64_t src = 0, rem = k;
          for (size_t d = 0; d < perm.size(); ++d) {
            src += (rem / out_strides[d]) * in_strides[perm[d]];
            rem %= out_strides[d];
          }
          ASSERT_EQ(std::memcmp(yb + k * es, xb + src * es, es), 0) << "element " << k;
        }
      }
    }
  }
}

// NCHW -> NHWC with 2 or 3 channels (an image input): the interleaving fast path,
// against the reference, for every element size and a partial last block.
TEST(Transpose, ChannelsLastOfFewChannelsMatchesReference) {
  for (DType dt : {DType::kUInt8, DType::kFloat16, DType::kFloat32, DType::kInt64})
    for (const Shape& shape : std::vector<Shape>{{2, 3, 37, 41}, {1, 2, 17, 70}, {3, 3, 5, 300}}) {
      Tensor x = Iota(dt, shape);
      Tensor fast = OpRun{"Transpose", 13, {{"perm", AInts({0, 2, 3, 1})}}, {x}}.Out();
      Tensor ref = OpRun{"Transpose", 13, {{"perm", AInts({0, 2, 3, 1})}}, {x}, 1, true}.Out();
      ASSERT_TRUE(SameBytes(fast, ref)) << ShapeToString(shape) << " " << DTypeName(dt);
      EXPECT_EQ(fast.shape(), (Shape{shape[0], shape[2], shape[3], shape[1]}));
    }
}

TEST(Transpose, DefaultReversesAndBadPermIsAnError) {
  Tensor x = Iota(DType::kFloat32, {2, 3, 4});
  EXPECT_EQ((OpRun{"Transpose", 13, {}, {x}}.Out().shape()), (Shape{4, 3, 2}));
  EXPECT_NE((OpRun{"Transpose", 13, {{"perm", AInts({0, 0, 1})}}, {x}}.Error().find("not a permutation")),
            std::string::npos);
  EXPECT_NE((OpRun{"Transpose", 13, {{"perm", AInts({1, 0})}}, {x}}.Error().find("rank")), std::string::npos);
  // Moving only extents of 1 aliases.
  Tensor z = Iota(DType::kFloat32, {1, 5, 1});
  EXPECT_EQ((OpRun{"Transpose", 13, {{"perm", AInts({2, 1, 0})}}, {z}}.Out().storage()), z.storage());
}

// ---------------------------------------------------------------- Concat / Split

TEST(Concat, NegativeAxisEmptyInputsAndErrors) {
  Tensor a = Iota(DType::kFloat32, {2, 1, 3}), b = Iota(DType::kFloat32, {2, 2, 3}), e(DType::kFloat32, {2, 0, 3});
  Tensor y = OpRun{"Concat", 13, {{"axis", AInt(-2)}}, {a, e, b}}.Out();
  ASSERT_EQ(y.shape(), (Shape{2, 3, 3}));
  const auto av = Values(a), bv = Values(b), yv = Values(y);
  for (int o = 0; o < 2; ++o)
    for (int k = 0; k < 3; ++k) {
      EXPECT_EQ(yv[o * 9 + k], av[o * 3 + k]);
      for (int j = 0; j < 2; ++j) EXPECT_EQ(yv[o * 9 + (1 + j) * 3 + k], bv[(o * 2 + j) * 3 + k]);
    }
  EXPECT_NE((OpRun{"Concat", 13, {{"axis", AInt(0)}}, {a, b}}.Error().find("differs")), std::string::npos);
  EXPECT_NE((OpRun{"Concat", 13, {{"axis", AInt(1)}}, {a, Iota(DType::kInt64, {2, 1, 3})}}.Error().find("type")),
            std::string::npos);
  EXPECT_FALSE((OpRun{"Concat", 13, {{"axis", AInt(3)}}, {a, b}}.Run().ok()));
  EXPECT_FALSE((OpRun{"Concat", 13, {}, {a, b}}.Run().ok()));
}

TEST(Concat, LargeBlocksAreCopiedExactly) {
  Tensor a = Iota(DType::kFloat32, {300000}), b = Iota(DType::kFloat32, {70001});
  Tensor y = OpRun{"Concat", 13, {{"axis", AInt(0)}}, {a, b}}.Out();
  ASSERT_EQ(y.numel(), 370001);
  EXPECT_EQ(std::memcmp(y.raw(), a.raw(), a.nbytes()), 0);
  EXPECT_EQ(std::memcmp(y.data<float>() + 300000, b.raw(), b.nbytes()), 0);
}

TEST(Split, SizesFromAttributeInputOrEqualParts) {
  Tensor x = Iota(DType::kInt64, {2, 6});
  auto r = OpRun{"Split", 13, {{"axis", AInt(-1)}}, {x, I64s({1, 0, 5})}, 3}.Run();
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ((*r)[0].shape(), (Shape{2, 1}));
  EXPECT_EQ((*r)[1].shape(), (Shape{2, 0}));
  EXPECT_EQ(Values((*r)[2]),
            (std::vector<double>{Values(x)[1], Values(x)[2], Values(x)[3], Values(x)[4], Values(x)[5], Values(x)[7],
                                 Values(x)[8], Values(x)[9], Values(x)[10], Values(x)[11]}));
  auto old = OpRun{"Split", 11, {{"axis", AInt(1)}, {"split", AInts({4, 2})}}, {x}, 2}.Run();
  ASSERT_TRUE(old.ok()) << old.error().message;
  EXPECT_EQ((*old)[1].shape(), (Shape{2, 2}));
  auto equal = OpRun{"Split", 13, {{"axis", AInt(1)}}, {x}, 3}.Run();
  ASSERT_TRUE(equal.ok());
  EXPECT_EQ((*equal)[2].shape(), (Shape{2, 2}));
  auto uneven = OpRun{"Split", 18, {{"axis", AInt(1)}, {"num_outputs", AInt(4)}}, {x}, 4}.Run();
  ASSERT_TRUE(uneven.ok()) << uneven.error().message;
  EXPECT_EQ((*uneven)[3].shape(), (Shape{2, 0}));
  EXPECT_NE((OpRun{"Split", 13, {{"axis", AInt(1)}}, {x}, 4}.Error().find("equal parts")), std::string::npos);
  EXPECT_NE((OpRun{"Split", 13, {{"axis", AInt(1)}}, {x, I64s({2, 2})}, 2}.Error().find("sums to")), std::string::npos);
  EXPECT_FALSE((OpRun{"Split", 13, {{"axis", AInt(1)}}, {x, I64s({7, -1})}, 2}.Run().ok()));
}

// ---------------------------------------------------------------- Slice

TEST(Slice, NegativeStepsAndClamping) {
  Tensor x = Iota(DType::kFloat32, {10});
  const auto xv = Values(x);
  const int64_t kMax = std::numeric_limits<int64_t>::max(), kMin = std::numeric_limits<int64_t>::min();
  auto slice = [&](int64_t s, int64_t e, int64_t step) {
    return Values(OpRun{"Slice", 13, {}, {x, I64s({s}), I64s({e}), I64s({0}), I64s({step})}}.Out());
  };
  EXPECT_EQ(slice(kMax, kMin, -1), (std::vector<double>(xv.rbegin(), xv.rend())));
  EXPECT_EQ(slice(-1, -11, -3), (std::vector<double>{xv[9], xv[6], xv[3], xv[0]}));
  EXPECT_EQ(slice(-100, 100, 4), (std::vector<double>{xv[0], xv[4], xv[8]}));
  EXPECT_EQ(slice(8, 2, 1), std::vector<double>{});
  EXPECT_EQ(slice(2, 8, kMax), std::vector<double>{xv[2]});
  EXPECT_EQ(slice(5, 3, kMin), std::vector<double>{xv[5]});
  EXPECT_EQ(slice(10, 0, -1).size(), 9u);
}

TEST(Slice, FastMatchesReferenceOn3D) {
  Tensor x = Iota(DType::kFloat16, {5, 6, 7});
  OpRun run{"Slice", 13, {}, {x, I64s({4, 1, -2}), I64s({-6, 100, 0}), I64s({0, -2, 2}), I64s({-2, 2, -1})}};
  Tensor fast = run.Out();
  run.reference_only = true;
  Tensor ref = run.Out();
  EXPECT_EQ(fast.shape(), (Shape{3, 3, 5}));
  EXPECT_TRUE(SameBytes(fast, ref));
}

TEST(Slice, AttributesBeforeOpset10AndErrors) {
  Tensor x = Iota(DType::kFloat32, {4, 5});
  EXPECT_EQ(
      (OpRun{"Slice", 9, {{"starts", AInts({1})}, {"ends", AInts({-1})}, {"axes", AInts({-1})}}, {x}}.Out().shape()),
      (Shape{4, 3}));
  EXPECT_NE((OpRun{"Slice", 13, {}, {x, I64s({0}), I64s({2}), I64s({1}), I64s({0})}}.Error().find("0")),
            std::string::npos);
  EXPECT_FALSE((OpRun{"Slice", 13, {}, {x, I64s({0, 0}), I64s({2, 2}), I64s({1, -1})}}.Run().ok()));
  EXPECT_FALSE((OpRun{"Slice", 13, {}, {x, I64s({0}), I64s({2}), I64s({2})}}.Run().ok()));
  EXPECT_FALSE((OpRun{"Slice", 13, {}, {x, I64s({0, 1}), I64s({2})}}.Run().ok()));
}

// ---------------------------------------------------------------- Gather family

TEST(Gather, ScalarAndNegativeIndicesAndErrors) {
  Tensor x = Iota(DType::kFloat32, {3, 4});
  const auto xv = Values(x);
  Tensor y = OpRun{"Gather", 13, {{"axis", AInt(-1)}}, {x, Tensor::Scalar<int64_t>(-1)}}.Out();
  EXPECT_EQ(y.shape(), (Shape{3}));
  EXPECT_EQ(Values(y), (std::vector<double>{xv[3], xv[7], xv[11]}));
  Tensor z = OpRun{"Gather", 13, {}, {x, Tensor::FromVector<int32_t>({2, 1}, {2, -3})}}.Out();
  EXPECT_EQ(z.shape(), (Shape{2, 1, 4}));
  EXPECT_EQ(Values(z)[4], xv[0]);
  EXPECT_NE((OpRun{"Gather", 13, {}, {x, I64s({3})}}.Error().find("out of range")), std::string::npos);
  EXPECT_NE((OpRun{"Gather", 13, {}, {x, I64s({-4})}}.Error().find("out of range")), std::string::npos);
  EXPECT_FALSE((OpRun{"Gather", 13, {}, {x, F32({1}, {0})}}.Run().ok()));
  EXPECT_FALSE((OpRun{"Gather", 13, {{"axis", AInt(2)}}, {x, I64s({0})}}.Run().ok()));
}

TEST(GatherElements, SmallerIndexShapeAndErrors) {
  Tensor x = Iota(DType::kInt64, {3, 3});
  const auto xv = Values(x);
  Tensor y = OpRun{"GatherElements", 13, {{"axis", AInt(1)}}, {x, I64({2, 2}, {2, -3, 1, 1})}}.Out();
  EXPECT_EQ(Values(y), (std::vector<double>{xv[2], xv[0], xv[4], xv[4]}));
  EXPECT_FALSE((OpRun{"GatherElements", 13, {}, {x, I64({1, 1}, {3})}}.Run().ok()));
  EXPECT_FALSE((OpRun{"GatherElements", 13, {}, {x, I64s({0})}}.Run().ok()));
  EXPECT_FALSE((OpRun{"GatherElements", 13, {{"axis", AInt(1)}}, {x, I64({4, 1}, {0, 0, 0, 0})}}.Run().ok()));
}

TEST(ScatterElements, ReductionsAndErrors) {
  Tensor x = F32({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor idx = I64({2, 2}, {0, 0, 2, -1});
  Tensor upd = F32({2, 2}, {10, 20, 30, 40});
  EXPECT_EQ(Values(OpRun{"ScatterElements", 16, {{"axis", AInt(1)}}, {x, idx, upd}}.Out()),
            (std::vector<double>{20, 2, 3, 4, 5, 40}));
  EXPECT_EQ(
      Values(OpRun{"ScatterElements", 16, {{"axis", AInt(1)}, {"reduction", AString("add")}}, {x, idx, upd}}.Out()),
      (std::vector<double>{31, 2, 3, 4, 5, 76}));
  EXPECT_EQ(
      Values(OpRun{"ScatterElements", 18, {{"axis", AInt(1)}, {"reduction", AString("min")}}, {x, idx, upd}}.Out()),
      (std::vector<double>{1, 2, 3, 4, 5, 6}));
  EXPECT_FALSE((OpRun{"ScatterElements", 16, {{"axis", AInt(1)}}, {x, I64({2, 2}, {0, 3, 0, 0}), upd}}.Run().ok()));
  EXPECT_FALSE((OpRun{"ScatterElements", 16, {{"reduction", AString("sum")}}, {x, idx, upd}}.Run().ok()));
  EXPECT_FALSE((OpRun{"ScatterElements", 16, {}, {x, idx, F32({1, 2}, {1, 2})}}.Run().ok()));
}

TEST(GatherND, BatchDimsNegativeIndicesAndErrors) {
  Tensor x = Iota(DType::kInt64, {2, 3, 4});
  const auto xv = Values(x);
  // batch_dims 1: for batch b, pick x[b, i] rows.
  Tensor y = OpRun{"GatherND", 13, {{"batch_dims", AInt(1)}}, {x, I64({2, 1, 1}, {-1, 0})}}.Out();
  ASSERT_EQ(y.shape(), (Shape{2, 1, 4}));
  EXPECT_EQ(Values(y), (std::vector<double>{xv[8], xv[9], xv[10], xv[11], xv[12], xv[13], xv[14], xv[15]}));
  Tensor z = OpRun{"GatherND", 13, {}, {x, I64({2, 3}, {1, 2, 3, 0, -3, -4})}}.Out();
  EXPECT_EQ(Values(z), (std::vector<double>{xv[23], xv[0]}));
  EXPECT_FALSE((OpRun{"GatherND", 13, {}, {x, I64({1, 3}, {2, 0, 0})}}.Run().ok()));
  EXPECT_FALSE((OpRun{"GatherND", 13, {}, {x, I64({1, 4}, {0, 0, 0, 0})}}.Run().ok()));
  EXPECT_FALSE((OpRun{"GatherND", 13, {{"batch_dims", AInt(1)}}, {x, I64({3, 1}, {0, 0, 0})}}.Run().ok()));
}

TEST(ScatterND, SlicesReductionsAndErrors) {
  Tensor x = F32({3, 2}, {1, 2, 3, 4, 5, 6});
  Tensor idx = I64({2, 1}, {-1, 0});
  Tensor upd = F32({2, 2}, {10, 20, 30, 40});
  EXPECT_EQ(Values(OpRun{"ScatterND", 13, {}, {x, idx, upd}}.Out()), (std::vector<double>{30, 40, 3, 4, 10, 20}));
  EXPECT_EQ(Values(OpRun{"ScatterND", 16, {{"reduction", AString("mul")}}, {x, I64({2, 1}, {1, 1}), upd}}.Out()),
            (std::vector<double>{1, 2, 900, 3200, 5, 6}));
  EXPECT_FALSE((OpRun{"ScatterND", 13, {}, {x, idx, F32({2}, {1, 2})}}.Run().ok()));
  EXPECT_FALSE((OpRun{"ScatterND", 13, {}, {x, I64({2, 1}, {3, 0}), upd}}.Run().ok()));
}

// ---------------------------------------------------------------- Shape, constants

TEST(Shape, StartEndAreClamped) {
  Tensor x(DType::kFloat32, {2, 3, 4, 5});
  EXPECT_EQ(Values(OpRun{"Shape", 15, {{"start", AInt(-3)}, {"end", AInt(-1)}}, {x}}.Out()),
            (std::vector<double>{3, 4}));
  EXPECT_EQ(Values(OpRun{"Shape", 15, {{"start", AInt(-10)}, {"end", AInt(10)}}, {x}}.Out()),
            (std::vector<double>{2, 3, 4, 5}));
  EXPECT_EQ((OpRun{"Shape", 15, {{"start", AInt(3)}, {"end", AInt(1)}}, {x}}.Out().shape()), (Shape{0}));
  Tensor s = OpRun{"Size", 13, {}, {x}}.Out();
  EXPECT_EQ(s.shape(), Shape{});
  EXPECT_EQ(s.data<int64_t>()[0], 120);
}

TEST(Constant, ValueKindsAndUnsupportedOnes) {
  EXPECT_EQ(Values(OpRun{"Constant", 13, {{"value_ints", AInts({3, -1})}}, {}}.Out()), (std::vector<double>{3, -1}));
  Tensor f = OpRun{"Constant", 13, {{"value_float", AFloat(2.5f)}}, {}}.Out();
  EXPECT_EQ(f.shape(), Shape{});
  EXPECT_EQ(f.data<float>()[0], 2.5f);
  EXPECT_EQ(Values(OpRun{"Constant", 13, {{"value", ATensor(F32({2}, {1, 2}))}}, {}}.Out()),
            (std::vector<double>{1, 2}));
  ir::Attribute sparse;
  sparse.type = ir::Attribute::Type::kOther;
  EXPECT_NE((OpRun{"Constant", 13, {{"sparse_value", sparse}}, {}}.Error().find("sparse")), std::string::npos);
  EXPECT_FALSE((OpRun{"Constant", 13, {}, {}}.Run().ok()));
}

TEST(ConstantOfShape, TypesAndEmptyShapes) {
  Tensor y =
      OpRun{"ConstantOfShape", 9, {{"value", ATensor(Tensor::FromVector<int32_t>({1}, {7}))}}, {I64s({2, 3})}}.Out();
  EXPECT_EQ(y.dtype(), DType::kInt32);
  EXPECT_EQ(Values(y), std::vector<double>(6, 7));
  Tensor s = OpRun{"ConstantOfShape", 9, {}, {Tensor(DType::kInt64, {0})}}.Out();
  EXPECT_EQ(s.shape(), Shape{});
  EXPECT_EQ(Values(s), std::vector<double>{0});
  EXPECT_FALSE((OpRun{"ConstantOfShape", 9, {}, {I64s({2, -1})}}.Run().ok()));
  EXPECT_FALSE((OpRun{"ConstantOfShape", 9, {{"value", ATensor(F32({2}, {1, 2}))}}, {I64s({2})}}.Run().ok()));
}

TEST(EyeLikeAndTrilu, OffsetsAndTypes) {
  Tensor x(DType::kInt32, {3, 4});
  Tensor e = OpRun{"EyeLike", 9, {{"k", AInt(-1)}, {"dtype", AInt(static_cast<int>(DType::kFloat64))}}, {x}}.Out();
  EXPECT_EQ(e.dtype(), DType::kFloat64);
  EXPECT_EQ(Values(e), (std::vector<double>{0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0}));
  Tensor m = Iota(DType::kFloat32, {2, 2, 3});
  const auto mv = Values(m);
  Tensor lower = OpRun{"Trilu", 14, {{"upper", AInt(0)}}, {m, Tensor::Scalar<int64_t>(-1)}}.Out();
  EXPECT_EQ(Values(lower), (std::vector<double>{0, 0, 0, mv[3], 0, 0, 0, 0, 0, mv[9], 0, 0}));
  EXPECT_FALSE((OpRun{"Trilu", 14, {}, {Iota(DType::kFloat32, {3})}}.Run().ok()));
}

// ---------------------------------------------------------------- Expand, Tile, Range

TEST(Expand, BroadcastsBothWaysAndMatchesReference) {
  Tensor x = Iota(DType::kFloat32, {3, 1});
  Tensor y = OpRun{"Expand", 13, {}, {x, I64s({2, 1, 4})}}.Out();
  EXPECT_EQ(y.shape(), (Shape{2, 3, 4}));
  const auto xv = Values(x), yv = Values(y);
  for (int i = 0; i < 24; ++i) EXPECT_EQ(yv[i], xv[(i / 4) % 3]);
  Tensor big = Iota(DType::kUInt8, {1, 37, 1, 5});
  OpRun run{"Expand", 13, {}, {big, I64s({3, 1, 41, 1})}};
  Tensor fast = run.Out();
  run.reference_only = true;
  EXPECT_TRUE(SameBytes(fast, run.Out()));
  EXPECT_NE((OpRun{"Expand", 13, {}, {x, I64s({2, 4})}}.Error().find("broadcast")), std::string::npos);
  EXPECT_FALSE((OpRun{"Expand", 13, {}, {x, I64s({-1})}}.Run().ok()));
}

TEST(Tile, RepeatsIncludingZero) {
  Tensor x = Iota(DType::kInt64, {2, 3});
  const auto xv = Values(x);
  Tensor y = OpRun{"Tile", 13, {}, {x, I64s({2, 2})}}.Out();
  ASSERT_EQ(y.shape(), (Shape{4, 6}));
  const auto yv = Values(y);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 6; ++j) EXPECT_EQ(yv[i * 6 + j], xv[(i % 2) * 3 + j % 3]);
  EXPECT_EQ((OpRun{"Tile", 13, {}, {x, I64s({0, 5})}}.Out().shape()), (Shape{0, 15}));
  EXPECT_FALSE((OpRun{"Tile", 13, {}, {x, I64s({2})}}.Run().ok()));
  EXPECT_FALSE((OpRun{"Tile", 13, {}, {x, I64s({1, -1})}}.Run().ok()));
}

TEST(Range, NegativeDeltaEmptyAndZeroDelta) {
  auto range = [](int32_t s, int32_t l, int32_t d) {
    return OpRun{"Range", 11, {}, {Tensor::Scalar<int32_t>(s), Tensor::Scalar<int32_t>(l), Tensor::Scalar<int32_t>(d)}};
  };
  EXPECT_EQ(Values(range(10, 4, -3).Out()), (std::vector<double>{10, 7}));
  EXPECT_EQ(range(1, 5, -1).Out().shape(), Shape{0});
  EXPECT_FALSE(range(1, 5, 0).Run().ok());
  Tensor f =
      OpRun{"Range", 11, {}, {Tensor::Scalar<float>(0.f), Tensor::Scalar<float>(1.f), Tensor::Scalar<float>(0.3f)}}
          .Out();
  EXPECT_EQ(f.numel(), 4);
  EXPECT_FALSE(
      (OpRun{"Range", 11, {}, {Tensor::Scalar<float>(0.f), Tensor::Scalar<int64_t>(1), Tensor::Scalar<float>(1.f)}}
           .Run()
           .ok()));
}

// ---------------------------------------------------------------- Pad

TEST(Pad, ModesOnIntegersWithCropping) {
  Tensor x = Tensor::FromVector<int32_t>({4}, {1, 2, 3, 4});
  auto pad = [&](const std::string& mode, int64_t b, int64_t e) {
    return Values(OpRun{"Pad", 13, {{"mode", AString(mode)}}, {x, I64s({b, e}), Tensor::Scalar<int32_t>(9)}}.Out());
  };
  EXPECT_EQ(pad("constant", 2, -1), (std::vector<double>{9, 9, 1, 2, 3}));
  EXPECT_EQ(pad("edge", -1, 2), (std::vector<double>{2, 3, 4, 4, 4}));
  EXPECT_EQ(pad("reflect", 2, 1), (std::vector<double>{3, 2, 1, 2, 3, 4, 3}));
  EXPECT_EQ(pad("reflect", 5, 0), (std::vector<double>{2, 3, 4, 3, 2, 1, 2, 3, 4}));  // repeated reflection
  EXPECT_EQ(pad("wrap", 1, 2), (std::vector<double>{4, 1, 2, 3, 4, 1, 2}));
  EXPECT_EQ(pad("constant", -4, 1), (std::vector<double>{9}));
  EXPECT_NE((OpRun{"Pad", 13, {}, {x, I64s({-5, 0})}}.Error().find("crop")), std::string::npos);
  EXPECT_NE((OpRun{"Pad", 13, {}, {x, I64s({1})}}.Error().find("entries")), std::string::npos);
  EXPECT_FALSE((OpRun{"Pad", 13, {{"mode", AString("mirror")}}, {x, I64s({1, 1})}}.Run().ok()));
  EXPECT_FALSE((OpRun{"Pad", 13, {{"mode", AString("edge")}}, {Tensor(DType::kInt32, {0}), I64s({1, 1})}}.Run().ok()));
}

TEST(Pad, Opset2AttributesAnd2D) {
  Tensor x = F32({2, 2}, {1, 2, 3, 4});
  Tensor y = OpRun{"Pad", 2, {{"pads", AInts({1, 0, 0, 1})}, {"value", AFloat(-1.f)}}, {x}}.Out();
  EXPECT_EQ(y.shape(), (Shape{3, 3}));
  EXPECT_EQ(Values(y), (std::vector<double>{-1, -1, -1, 1, 2, -1, 3, 4, -1}));
  Tensor z = OpRun{"Pad", 18, {{"mode", AString("edge")}}, {x, I64s({1, 1}), Tensor(), I64s({-1})}}.Out();
  EXPECT_EQ(Values(z), (std::vector<double>{1, 1, 2, 2, 3, 3, 4, 4}));
}

// ---------------------------------------------------------------- Resize

TEST(Resize, NearestMovesAnyElementType) {
  Tensor x = Tensor::FromVector<int8_t>({1, 1, 2, 2}, {1, -2, 3, -4});
  Tensor y = OpRun{"Resize", 13, {{"mode", AString("nearest")}}, {x, Tensor(), F32({4}, {1, 1, 2, 1.5f})}}.Out();
  ASSERT_EQ(y.shape(), (Shape{1, 1, 4, 3}));
  EXPECT_EQ(y.dtype(), DType::kInt8);
  EXPECT_EQ(Values(y), (std::vector<double>{1, 1, -2, 1, 1, -2, 3, 3, -4, 3, 3, -4}));
}

TEST(Resize, LinearAlignCornersIsExactOnLinearData3D) {
  // f(i, j, k) = 2i - 3j + 0.5k is reproduced exactly by multilinear interpolation.
  Shape in{1, 3, 4, 5};
  Tensor x(DType::kFloat32, in);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 5; ++k) x.data<float>()[(i * 4 + j) * 5 + k] = 2.f * i - 3.f * j + 0.5f * k;
  Tensor y = OpRun{"Resize",
                   13,
                   {{"mode", AString("linear")}, {"coordinate_transformation_mode", AString("align_corners")}},
                   {x, Tensor(), Tensor(), I64s({1, 5, 3, 9})}}
                 .Out();
  ASSERT_EQ(y.shape(), (Shape{1, 5, 3, 9}));
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 9; ++k) {
        const double expected = 2.0 * (i * 2.0 / 4) - 3.0 * (j * 3.0 / 2) + 0.5 * (k * 4.0 / 8);
        ASSERT_NEAR(y.data<float>()[(i * 3 + j) * 9 + k], expected, 1e-5) << i << " " << j << " " << k;
      }
}

TEST(Resize, CubicIdentityScaleKeepsValues) {
  Tensor x = Iota(DType::kFloat32, {2, 3, 5});
  Tensor y = OpRun{"Resize", 13, {{"mode", AString("cubic")}}, {x, Tensor(), F32({3}, {1, 1, 1})}}.Out();
  EXPECT_EQ(Values(y), Values(x));
}

TEST(Resize, TfCropAndResizeExtrapolates) {
  Tensor x = Iota(DType::kFloat32, {1, 1, 2, 2});
  Tensor y = OpRun{"Resize",
                   13,
                   {{"mode", AString("nearest")},
                    {"coordinate_transformation_mode", AString("tf_crop_and_resize")},
                    {"extrapolation_value", AFloat(7.f)}},
                   {x, F32({8}, {0, 0, 0, 0, 1, 1, 1, 2}), Tensor(), I64s({1, 1, 2, 3})}}
                 .Out();
  ASSERT_EQ(y.shape(), (Shape{1, 1, 2, 3}));
  const auto yv = Values(y);
  EXPECT_EQ(yv[2], 7);  // x = 2 maps past the input
  EXPECT_EQ(yv[5], 7);
}

TEST(Resize, BadInputsAreErrors) {
  Tensor x = Iota(DType::kFloat32, {1, 1, 2, 2});
  EXPECT_FALSE((OpRun{"Resize", 13, {}, {x, Tensor(), F32({4}, {1, 1, 2, 2}), I64s({1, 1, 4, 4})}}.Run().ok()));
  EXPECT_FALSE((OpRun{"Resize", 13, {}, {x}}.Run().ok()));
  EXPECT_FALSE((OpRun{"Resize", 13, {}, {x, Tensor(), F32({2}, {2, 2})}}.Run().ok()));
  EXPECT_FALSE((OpRun{"Resize", 13, {}, {x, Tensor(), F32({4}, {1, 1, 0, 2})}}.Run().ok()));
  EXPECT_FALSE((OpRun{"Resize", 13, {{"mode", AString("area")}}, {x, Tensor(), F32({4}, {1, 1, 2, 2})}}.Run().ok()));
  EXPECT_FALSE((OpRun{"Resize", 10, {{"mode", AString("cubic")}}, {x, F32({4}, {1, 1, 2, 2})}}.Run().ok()));
  EXPECT_FALSE(
      (OpRun{"Resize", 13, {{"mode", AString("linear")}}, {Tensor(DType::kBool, {1, 2}), Tensor(), F32({2}, {1, 2})}}
           .Run()
           .ok()));
}

TEST(Upsample, Opset7ScalesAttribute) {
  Tensor x = F32({1, 2}, {1, 2});
  Tensor y = OpRun{"Upsample", 7, {{"scales", AFloats({1, 3})}}, {x}}.Out();
  EXPECT_EQ(Values(y), (std::vector<double>{1, 1, 1, 2, 2, 2}));
  Tensor z = OpRun{"Upsample", 9, {{"mode", AString("linear")}}, {x, F32({2}, {1, 2})}}.Out();
  EXPECT_EQ(Values(z), (std::vector<double>{1, 1.5, 2, 2}));
}

// ---------------------------------------------------------------- Space/depth, misc

TEST(DepthToSpace, ModesRoundTripWithSpaceToDepth) {
  Tensor x = Iota(DType::kFloat32, {2, 8, 3, 5});
  Tensor d = OpRun{"SpaceToDepth",
                   13,
                   {{"blocksize", AInt(2)}},
                   {OpRun{"DepthToSpace", 13, {{"blocksize", AInt(2)}}, {x}}.Out()}}
                 .Out();
  EXPECT_TRUE(SameBytes(d, x));
  Tensor small = Iota(DType::kInt64, {1, 4, 1, 1});
  EXPECT_EQ(Values(OpRun{"DepthToSpace",
                         13,
                         {{"blocksize", AInt(2)}, {"mode", AString("CRD")}},
                         {Iota(DType::kInt64, {1, 8, 1, 1})}}
                       .Out())
                .size(),
            8u);
  const auto sv = Values(small);
  EXPECT_EQ(Values(OpRun{"DepthToSpace", 13, {{"blocksize", AInt(2)}}, {small}}.Out()), sv);
  EXPECT_FALSE((OpRun{"DepthToSpace", 13, {{"blocksize", AInt(3)}}, {x}}.Run().ok()));
  EXPECT_FALSE((OpRun{"DepthToSpace", 13, {}, {x}}.Run().ok()));
  EXPECT_FALSE((OpRun{"SpaceToDepth", 13, {{"blocksize", AInt(2)}}, {x}}.Run().ok()));
  EXPECT_FALSE((OpRun{"SpaceToDepth", 13, {{"blocksize", AInt(2)}}, {Iota(DType::kFloat32, {4, 4})}}.Run().ok()));
}

TEST(CompressOneHotNonZero, SmallCases) {
  Tensor x = Iota(DType::kFloat32, {3, 2});
  const auto xv = Values(x);
  Tensor cond = Tensor::FromVector<bool>({2}, {false, true});
  EXPECT_EQ(Values(OpRun{"Compress", 11, {{"axis", AInt(-1)}}, {x, cond}}.Out()),
            (std::vector<double>{xv[1], xv[3], xv[5]}));
  EXPECT_EQ(Values(OpRun{"Compress", 11, {}, {x, cond}}.Out()), (std::vector<double>{xv[1]}));
  EXPECT_FALSE((OpRun{"Compress", 11, {{"axis", AInt(1)}}, {x, Tensor::FromVector<bool>({3}, {1, 1, 1})}}.Run().ok()));

  Tensor oh =
      OpRun{"OneHot", 11, {{"axis", AInt(0)}}, {I64s({1, -1, 5}), Tensor::Scalar<int64_t>(3), F32({2}, {0, 2})}}.Out();
  EXPECT_EQ(oh.shape(), (Shape{3, 3}));
  EXPECT_EQ(Values(oh), (std::vector<double>{0, 0, 0, 2, 0, 0, 0, 2, 0}));
  EXPECT_FALSE((OpRun{"OneHot", 11, {}, {I64s({1}), Tensor::Scalar<int64_t>(0), F32({2}, {0, 1})}}.Run().ok()));

  Tensor nz = OpRun{"NonZero", 13, {}, {F32({2, 2}, {0, 1, 2, 0})}}.Out();
  EXPECT_EQ(nz.shape(), (Shape{2, 2}));
  EXPECT_EQ(Values(nz), (std::vector<double>{0, 1, 1, 0}));
  EXPECT_EQ((OpRun{"NonZero", 13, {}, {Tensor(DType::kInt32, {0, 3})}}.Out().shape()), (Shape{2, 0}));
}

TEST(TensorOps, HugeOrOverflowingShapesAreErrors) {
  Tensor x = Iota(DType::kFloat32, {4});
  const int64_t big = int64_t{1} << 62, kMin = std::numeric_limits<int64_t>::min();
  // 2^62 x 2^62 x 4 wraps around to 0 in int64: must not be accepted as 4 elements.
  EXPECT_FALSE((OpRun{"Reshape", 14, {}, {x, I64s({big, big, 4})}}.Run().ok()));
  EXPECT_FALSE((OpRun{"Reshape", 14, {}, {x, I64s({big, -1})}}.Run().ok()));
  EXPECT_FALSE((OpRun{"Tile", 13, {}, {x, I64s({big + 1})}}.Run().ok()));
  EXPECT_FALSE((OpRun{"Pad", 13, {}, {x, I64s({kMin, 0})}}.Run().ok()));
  EXPECT_FALSE((OpRun{"Pad", 13, {}, {x, I64s({big, big})}}.Run().ok()));
  EXPECT_FALSE((OpRun{"Split", 13, {}, {x, I64s({big, big, big, big + 4})}, 4}.Run().ok()));
  EXPECT_FALSE((OpRun{"Resize", 13, {}, {x, Tensor(), F32({1}, {1e30f})}}.Run().ok()));
  EXPECT_FALSE((OpRun{"Resize", 13, {}, {x, Tensor(), Tensor(), I64s({big})}}.Run().ok()));
  EXPECT_FALSE((OpRun{"ConstantOfShape", 9, {}, {I64s({big, big})}}.Run().ok()));
  EXPECT_FALSE((OpRun{"Expand", 13, {}, {x, I64s({big, 1})}}.Run().ok()));
}

TEST(TensorOps, ConstantInputsAreFoldedAtCreation) {
  OpRun run{"Transpose", 13, {{"perm", AInts({1, 0})}}, {Iota(DType::kFloat32, {2, 3})}};
  run.constant_inputs = true;
  EXPECT_EQ(run.Out().shape(), (Shape{3, 2}));
  OpRun bad{"Gather", 13, {}, {Iota(DType::kFloat32, {2}), I64s({9})}};
  bad.constant_inputs = true;
  EXPECT_NE(bad.Error().find("out of range"), std::string::npos);
}

}  // namespace
}  // namespace seqto
