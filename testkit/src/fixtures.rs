//! The tests' and the self-test's inputs on a device: each uploads its
//! reference inputs ([`ScanInputs`], [`MoeInputs`]) one way, and hands out the
//! launchers' typed buffers or raw pointers over them.

use mlxcel_amdgpu::kernels::mamba1_scan::{ScanBuffers, ScanPointers};
use mlxcel_amdgpu::kernels::moe::{QuantizedBuffers, QuantizedPointers, RoutedBuffers};
use mlxcel_amdgpu::{Device, DeviceBuffer, Element, Result};

use crate::reference::mamba::ScanInputs;
use crate::reference::moe::{MoeInputs, Quantized};

/// `v` converted to `T`, on `device`.
fn upload_as<T: Element>(device: &Device, v: &[f32]) -> Result<DeviceBuffer<T>> {
    device.upload(&v.iter().map(|&x| T::from_f32(x)).collect::<Vec<T>>())
}

/// A scan's inputs on a device (x, dt, Bm, Cm, Dskip as `T`; A as f32).
pub struct ScanUpload<T> {
    /// x, dt, Bm, Cm and Dskip, in that order.
    typed: [DeviceBuffer<T>; 5],
    a: DeviceBuffer<f32>,
}

impl<T: Element> ScanUpload<T> {
    pub fn new(device: &Device, s: &ScanInputs) -> Result<Self> {
        let up = |v: &[f32]| upload_as::<T>(device, v);
        let typed = [up(&s.x)?, up(&s.dt)?, up(&s.bm)?, up(&s.cm)?, up(&s.dskip)?];
        Ok(ScanUpload { typed, a: device.upload(&s.a)? })
    }
}

impl<T> ScanUpload<T> {
    /// The uploaded Bm.
    pub fn bm(&self) -> &DeviceBuffer<T> {
        &self.typed[2]
    }

    /// The raw launch's pointers: these inputs and the given state and output.
    pub fn pointers(&self, state_in: u64, y: u64, state_out: u64) -> ScanPointers {
        let [x, dt, bm, cm, dskip] = self.typed.each_ref().map(DeviceBuffer::ptr);
        ScanPointers { x, dt, bm, cm, a: self.a.ptr(), dskip, state_in, y, state_out }
    }

    /// The safe `run`'s buffers: these inputs and the given state and output.
    pub fn buffers<'a>(
        &'a self,
        state_in: Option<&'a DeviceBuffer<f32>>,
        y: &'a mut DeviceBuffer<T>,
        state_out: &'a mut DeviceBuffer<f32>,
    ) -> ScanBuffers<'a, T> {
        let [x, dt, bm, cm, dskip] = self.typed.each_ref();
        ScanBuffers { x, dt, bm, cm, a: &self.a, dskip, state_in, y, state_out }
    }
}

/// One quantized matrix's buffers on a device, owned: what [`QuantizedBuffers`] borrows.
pub struct QuantizedUpload<T> {
    pub w: DeviceBuffer<u32>,
    pub scales: DeviceBuffer<T>,
    pub biases: DeviceBuffer<T>,
}

impl<T: Element> QuantizedUpload<T> {
    /// Uploads `q`, its scales and biases converted to `T`.
    pub fn new(device: &Device, q: &Quantized) -> Result<Self> {
        let (scales, biases) = (upload_as(device, &q.scales)?, upload_as(device, &q.biases)?);
        Ok(QuantizedUpload { w: device.upload(&q.words)?, scales, biases })
    }
}

impl<T> QuantizedUpload<T> {
    pub fn buffers(&self) -> QuantizedBuffers<'_, T> {
        QuantizedBuffers { w: &self.w, scales: &self.scales, biases: &self.biases }
    }

    pub fn pointers(&self) -> QuantizedPointers {
        self.buffers().pointers()
    }
}

/// A routed forward's inputs on a device.
pub struct RoutedUpload<T> {
    pub x: DeviceBuffer<T>,
    pub idx: DeviceBuffer<u32>,
    pub scores: DeviceBuffer<f32>,
    pub w1: QuantizedUpload<T>,
    pub w2: QuantizedUpload<T>,
}

impl<T: Element> RoutedUpload<T> {
    pub fn new(device: &Device, inp: &MoeInputs) -> Result<Self> {
        Ok(RoutedUpload {
            x: upload_as(device, &inp.x)?,
            idx: device.upload(&inp.idx)?,
            scores: device.upload(&inp.scores)?,
            w1: QuantizedUpload::new(device, &inp.w1)?,
            w2: QuantizedUpload::new(device, &inp.w2)?,
        })
    }
}

impl<T> RoutedUpload<T> {
    /// The safe routed forward's buffers: these inputs and the given outputs.
    pub fn routed<'a>(
        &'a self,
        out: &'a mut DeviceBuffer<T>,
        scratch: &'a mut DeviceBuffer<u8>,
        status: Option<&'a mut DeviceBuffer<u32>>,
    ) -> RoutedBuffers<'a, T> {
        let (x, idx, scores) = (&self.x, &self.idx, &self.scores);
        RoutedBuffers { x, idx, scores, w1: self.w1.buffers(), w2: self.w2.buffers(), out, scratch, status }
    }
}
