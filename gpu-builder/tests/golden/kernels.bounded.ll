; ModuleID = 'kernels_device.9f3c2a1b-cgu.0'
source_filename = "kernels_device.9f3c2a1b-cgu.0"
target datalayout = "e-p:64:64-p1:64:64-p2:32:32-p3:32:32-p4:64:64-p5:32:32-p6:32:32-p7:160:256:256:32-p8:128:128:128:48-p9:192:256:256:32-i64:64-v16:16-v24:32-v32:32-v48:64-v96:128-v192:256-v256:256-v512:512-v1024:1024-v2048:2048-n32:64-S32-A5-G1-ni:7:8:9"
target triple = "amdgcn-amd-amdhsa"

; Function Attrs: nofree norecurse nosync nounwind
define amdgpu_kernel void @xielu_f32(ptr addrspace(4) noalias nocapture readonly byref(%XieluArgs) align 8 %args) unnamed_addr #0 "amdgpu-flat-work-group-size"="1,256" {
start:
  ret void
}

define amdgpu_kernel void @other(ptr addrspace(4) %args) unnamed_addr #0 {
start:
  ret void
}

; Function Attrs: nofree norecurse nosync nounwind
define amdgpu_kernel void @moe_down_bf16(ptr addrspace(4) noalias nocapture readonly byref(%MoeDownArgs) align 8 %args) unnamed_addr #1 "amdgpu-flat-work-group-size"="1,128" {
start:
  ret void
}

attributes #0 = { nofree norecurse nosync nounwind "target-cpu"="gfx1151" }
attributes #1 = { nofree norecurse nosync nounwind "target-cpu"="gfx1151" "uniform-work-group-size"="true" }
