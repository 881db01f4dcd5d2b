# Sourced by the GPU scripts (bench/gpu-bench.sh, bench/gpu-layer.sh, bench/gpu-ab.sh):
# NVIDIA's OpenCL driver ships without an ICD file in some images (CUDA
# containers); register it through a private vendors directory.
if ! grep -qs nvidia /etc/OpenCL/vendors/*.icd && ldconfig -p | grep -q libnvidia-opencl.so.1; then
  vendors=$(mktemp -d)
  cp /etc/OpenCL/vendors/*.icd "$vendors"/ 2>/dev/null || true
  echo libnvidia-opencl.so.1 >"$vendors/nvidia.icd"
  export OCL_ICD_VENDORS=$vendors
fi
