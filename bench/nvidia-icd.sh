# SPDX-License-Identifier: Apache-2.0
# Sourced by the GPU scripts (bench/gpu-*.sh): NVIDIA's OpenCL driver ships
# without an ICD file in some images (CUDA containers); register it through
# a private vendors directory. Also: find the CUDA runtime the benches load
# for their baselines (CLPIN_BENCH_CUDART, when the dynamic loader does not
# know it), gpu_counts N, the GPU counts a multi-GPU script measures, and
# ocl_icd_from_deb DIR, a Debian ocl-icd .deb's loader in front (OCL_ICD_DEB).
if ! grep -qs nvidia /etc/OpenCL/vendors/*.icd && ldconfig -p | grep -q libnvidia-opencl.so.1; then
  vendors=$(mktemp -d)
  cp /etc/OpenCL/vendors/*.icd "$vendors"/ 2>/dev/null || true
  echo libnvidia-opencl.so.1 >"$vendors/nvidia.icd"
  export OCL_ICD_VENDORS=$vendors
fi
if [ -z "${CLPIN_BENCH_CUDART:-}" ] && ! ldconfig -p 2>/dev/null | grep -q 'libcudart\.so'; then
  f=$(find /usr/local/cuda*/ /opt /usr/lib /usr/local/lib -name 'libcudart.so*' 2>/dev/null | head -n 1 || true)
  [ -z "$f" ] || export CLPIN_BENCH_CUDART=$f
fi

# 1, 2, 4, ... below N, and N: "1,2,4" for 4 GPUs, "1,2,4,6" for 6.
gpu_counts() {
  local n=$1 c out=1
  for ((c = 2; c < n; c *= 2)); do out="$out,$c"; done
  [ "$n" -gt 1 ] && out="$out,$n"
  echo "$out"
}

# With OCL_ICD_DEB (the path of a Debian ocl-icd .deb), unpack it under the
# folder $1 and load its libOpenCL before the machine's.
ocl_icd_from_deb() {
  [ -n "${OCL_ICD_DEB:-}" ] || return 0
  dpkg-deb -x "$OCL_ICD_DEB" "$1/ocl-icd"
  export LD_LIBRARY_PATH=$1/ocl-icd/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
}
