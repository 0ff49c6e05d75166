//! The weight-type tables: the GPU's against the device registry, and the support matrix
//! of every backend.

use device::formats::{format, reference_form, support_matrix};

#[test]
fn every_shader_is_a_registered_type_once() {
    for (i, s) in gpu::SHADERS.iter().enumerate() {
        assert!(format(s.ty).is_some(), "{} not registered", s.ty);
        assert!(
            gpu::SHADERS[i + 1..].iter().all(|t| t.ty != s.ty),
            "{} twice",
            s.ty
        );
        assert_eq!(gpu::form_name(s.ty), Some("wgsl"));
    }
}

#[test]
fn the_support_matrix_names_every_type_and_the_backends_that_run_it() {
    let m = support_matrix(&[
        ("reference", reference_form),
        ("cpu", kernels::forms::form_name),
        ("gpu", gpu::form_name),
    ]);
    let want = "\
type    writes reference   cpu         gpu
F32     yes    f32         f32         wgsl
F16     yes    f32         f32         wgsl
BF16    yes    f32         f32         wgsl
Q4_0    yes    f32         int8 packed wgsl
Q4_1    yes    f32         int8 packed wgsl
Q5_0    yes    f32         int8 packed wgsl
Q5_1    yes    f32         int8 packed wgsl
Q8_0    yes    f32         int8 packed wgsl
Q2_K    yes    f32         int8        wgsl
Q3_K    yes    f32         int8        wgsl
Q4_K    yes    f32         int8 packed wgsl
Q5_K    yes    f32         int8        wgsl
Q6_K    yes    f32         int8 packed wgsl
IQ4_NL  yes    f32         int8 packed wgsl
IQ4_XS  yes    f32         int8 packed wgsl
TQ1_0   yes    f32         int8        wgsl
TQ2_0   yes    f32         int8        wgsl
MXFP4   yes    f32         int8 packed wgsl
NVFP4   yes    f32         f32         wgsl
Q1_0    yes    f32         int8        wgsl
Q2_0    yes    f32         int8        wgsl
IQ2_XXS yes    f32         int8 packed wgsl
IQ2_XS  yes    f32         int8        wgsl
IQ2_S   yes    f32         int8        wgsl
IQ3_XXS yes    f32         int8 packed wgsl
IQ3_S   yes    f32         int8        wgsl
IQ1_S   yes    f32         int8        wgsl
IQ1_M   -      f32         int8        wgsl
Q8_1    yes    f32         int8        wgsl";
    assert_eq!(m.to_string(), want, "\n{m}");
    for backend in ["reference", "cpu", "gpu"] {
        assert!(
            m.gaps(backend).is_empty(),
            "{backend}: {:?}",
            m.gaps(backend)
        );
    }
}
