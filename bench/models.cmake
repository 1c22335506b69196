# The benchmark models (tools/make_bench_models.py), generated at build time into
# ${SEQTO_BENCH_MODELS_DIR} by the target seqto_bench_models. Included from
# bench/CMakeLists.txt and tests/CMakeLists.txt (the interop tests use them too).
set(SEQTO_PYTHON3 /usr/bin/python3 CACHE FILEPATH "Python 3 with onnx and numpy (Debian's python3-onnx, python3-numpy)")
set(SEQTO_BENCH_MODELS_DIR ${CMAKE_BINARY_DIR}/bench/models)
set(SEQTO_BENCH_MODELS ${SEQTO_BENCH_MODELS_DIR}/resnet50.onnx ${SEQTO_BENCH_MODELS_DIR}/mobilenetv2.onnx
    ${SEQTO_BENCH_MODELS_DIR}/squeezenet.onnx ${SEQTO_BENCH_MODELS_DIR}/vit.onnx)
if(NOT TARGET seqto_bench_models)
  add_custom_command(
    OUTPUT ${SEQTO_BENCH_MODELS}
    COMMAND ${SEQTO_PYTHON3} ${PROJECT_SOURCE_DIR}/tools/make_bench_models.py ${SEQTO_BENCH_MODELS_DIR}
    DEPENDS ${PROJECT_SOURCE_DIR}/tools/make_bench_models.py
    COMMENT "Generating benchmark models (ResNet-50, MobileNetV2, SqueezeNet, ViT) in ${SEQTO_BENCH_MODELS_DIR}"
    VERBATIM)
  add_custom_target(seqto_bench_models DEPENDS ${SEQTO_BENCH_MODELS})
endif()
