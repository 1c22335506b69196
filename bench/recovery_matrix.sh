#!/bin/bash
# The accuracy-recovery evidence of docs/design.md section 7, in one command:
#
#   bench/recovery_matrix.sh MOBILENETV2_12.onnx IMAGES_DIR [ROW ...]
#
# The ONNX model zoo's ImageNet MobileNetV2-12 and a folder of labelled photos (one
# class folder per photo, named by class index: 000, 002, ...). The photos are split into a fixed calibration
# set (the folders whose index is a multiple of 10) and an evaluation set (the rest);
# each row quantizes MobileNetV2-12 statically (uint8 activations, int8 weights,
# MinMax unless the row says mse) on the calibration photos, per tensor and per
# channel, and evaluates the model on the evaluation photos against the float model
# (top-1, agreement, output SQNR) and on ONNX Runtime against seqto's engine (the
# share of photos whose top-1 the two runtimes agree on). ROWs (default: all):
#   none cle bc cle_bc adaround cle_ada_bc cle_bc_mse cle_ada_bc_mse
# Environment: SEQTO (default build/seqto), WORK (default a fresh temporary folder;
# the quantized models and JSON results stay there), THREADS (default 2).
# adaround rows take about 5 minutes each on 2 cores; the others under one.
set -euo pipefail

if [ $# -lt 2 ] || [ ! -f "$1" ] || [ ! -d "$2" ]; then
  echo "usage: $0 MOBILENETV2_12.onnx IMAGES_DIR [ROW ...]" >&2
  exit 1
fi
model=$1
images=$2
shift 2
rows=("$@")
[ ${#rows[@]} -eq 0 ] && rows=(none cle bc cle_bc adaround cle_ada_bc cle_bc_mse cle_ada_bc_mse)
seqto=${SEQTO:-$(dirname "$0")/../build/seqto}
work=${WORK:-$(mktemp -d /tmp/seqto_recovery.XXXXXX)}
threads=${THREADS:-2}
pre=resize=256,crop=224,scale=0.00392156862745098,mean=0.485:0.456:0.406,std=0.229:0.224:0.225,color=rgb,layout=nchw

# The split, as symbolic links; the class list names folders 000..999 in order.
mkdir -p "$work/calib" "$work/eval"
for d in "$images"/*/; do
  n=$(basename "$d")
  if [ $((10#$n % 10)) -eq 0 ]; then ln -sfn "$d" "$work/calib/$n"; else ln -sfn "$d" "$work/eval/$n"; fi
done
seq -f %03g 0 999 > "$work/classes.txt"

flags_of() {
  case $1 in
    none) echo "" ;;
    cle) echo "--recover cle" ;;
    bc) echo "--recover bias_correction" ;;
    cle_bc) echo "--recover cle --recover bias_correction" ;;
    adaround) echo "--recover adaround" ;;
    cle_ada_bc) echo "--recover cle --recover adaround --recover bias_correction" ;;
    cle_bc_mse) echo "--recover cle --recover bias_correction --calibration mse" ;;
    cle_ada_bc_mse) echo "--recover cle --recover adaround --recover bias_correction --calibration mse" ;;
    *) echo "unknown row '$1'" >&2; exit 1 ;;
  esac
}

field() { # JSON file, python expression on j
  python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1"
}

printf '%-16s %-12s %7s %9s %9s %10s %10s\n' row weights top-1 agree sqnr_dB ort_agree quantize_s
for row in "${rows[@]}"; do
  flags=$(flags_of "$row")
  for weights in per-tensor per-channel; do
    pc=""
    [ $weights = per-channel ] && pc=--per-channel
    q=$work/${row}_$weights.onnx
    start=$(date +%s.%N)
    # shellcheck disable=SC2086
    "$seqto" quantize "$model" -o "$q" --calib-data "$work/calib" --preprocess $pre --batch 50 \
      --threads "$threads" $pc $flags > "$q.log" 2>&1 || { echo "$row $weights: quantize failed, see $q.log" >&2; exit 1; }
    end=$(date +%s.%N)
    "$seqto" eval "$q" --data "$work/eval" --classes "$work/classes.txt" --preprocess $pre --batch 50 \
      --threads "$threads" --reference "$model" --json "$q.eval.json" > /dev/null 2> "$q.eval.log" ||
      { echo "$row $weights: eval failed, see $q.eval.log" >&2; exit 1; }
    "$seqto" eval "$q" --runner ort --data "$work/eval" --classes "$work/classes.txt" --preprocess $pre \
      --batch 50 --threads "$threads" --reference "$q" --json "$q.ort.json" > /dev/null 2> "$q.ort.log" ||
      { echo "$row $weights: eval on ONNX Runtime failed, see $q.ort.log" >&2; exit 1; }
    printf '%-16s %-12s %6.2f%% %8.2f%% %9.2f %9.2f%% %10.1f\n' "$row" $weights \
      "$(field "$q.eval.json" "j['accuracy']['top1']")" "$(field "$q.eval.json" "j['agreement']['top1']")" \
      "$(field "$q.eval.json" "j['agreement']['sqnr_db']")" "$(field "$q.ort.json" "j['agreement']['top1']")" \
      "$(python3 -c "print($end - $start)")"
  done
done
echo "models and JSON results in $work"
