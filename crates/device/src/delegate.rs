//! [`delegate_ops!`]: a device that wraps another and changes a few of its ops.

/// Inside `impl Device for W`, the [`crate::Device`] methods other than `describe`,
/// `upload_matrices`, `begin`, `matmul` and `moe`, each handing its call to the device in
/// field `$inner` (a `Box<dyn Device>`). The wrapper writes those five itself: what it adds
/// is in them (a weight's product, a step's start), and a wrapper that adds nothing to
/// one of them hands that call on too.
#[macro_export]
macro_rules! delegate_ops {
    ($inner:ident) => {
        fn supports(&self, op: $crate::Op) -> bool {
            self.$inner.supports(op)
        }
        fn supports_type(&self, ty: $crate::__gguf::GgmlType) -> bool {
            self.$inner.supports_type(ty)
        }
        fn matrix_bytes(
            &self,
            ty: $crate::__gguf::GgmlType,
            n_rows: usize,
            n_cols: usize,
            role: $crate::Role,
        ) -> u64 {
            self.$inner.matrix_bytes(ty, n_rows, n_cols, role)
        }
        fn rest(&self) {
            self.$inner.rest()
        }
        fn alloc(&mut self, len: usize) -> $crate::Result<$crate::Buf> {
            self.$inner.alloc(len)
        }
        fn upload(&mut self, buf: $crate::Buf, at: usize, data: &[f32]) {
            self.$inner.upload(buf, at, data)
        }
        fn download(&mut self, buf: $crate::Buf, at: usize, out: &mut [f32]) {
            self.$inner.download(buf, at, out)
        }
        fn kv_alloc(&mut self, cfg: $crate::__kv::KvConfig) -> $crate::Result<()> {
            self.$inner.kv_alloc(cfg)
        }
        fn kv_copy_block(&mut self, from: u32, to: u32) {
            self.$inner.kv_copy_block(from, to)
        }
        fn kv_read_block(&mut self, block: u32, out: &mut Vec<u8>) {
            self.$inner.kv_read_block(block, out)
        }
        fn kv_write_block(&mut self, block: u32, data: &[u8]) {
            self.$inner.kv_write_block(block, data)
        }
        fn kv_read_companion(&mut self, companion: u32, out: &mut Vec<u8>) {
            self.$inner.kv_read_companion(companion, out)
        }
        fn kv_write_companion(&mut self, companion: u32, data: &[u8]) {
            self.$inner.kv_write_companion(companion, data)
        }
        fn state_restore(&mut self, slot: u32, row: usize) {
            self.$inner.state_restore(slot, row)
        }
        fn state_save(&mut self, slot: u32, snap: u32) {
            self.$inner.state_save(slot, snap)
        }
        fn state_load(&mut self, snap: u32, slot: u32) {
            self.$inner.state_load(snap, slot)
        }
        fn state_read(&mut self, snap: u32, out: &mut Vec<u8>) {
            self.$inner.state_read(snap, out)
        }
        fn state_write(&mut self, snap: u32, data: &[u8]) {
            self.$inner.state_write(snap, data)
        }
        fn finish(&mut self) {
            self.$inner.finish()
        }
        fn embed(&mut self, table: $crate::Mat, tokens: &[u32], out: $crate::Buf) {
            self.$inner.embed(table, tokens, out)
        }
        fn rms_norm(
            &mut self,
            x: $crate::Buf,
            w: $crate::Buf,
            rows: usize,
            width: usize,
            eps: f32,
            out: $crate::Buf,
        ) {
            self.$inner.rms_norm(x, w, rows, width, eps, out)
        }
        fn rope(&mut self, x: $crate::Buf, heads: usize, spec: &$crate::RopeSpec) {
            self.$inner.rope(x, heads, spec)
        }
        fn kv_store(&mut self, layer: usize, k: $crate::Buf, v: $crate::Buf) {
            self.$inner.kv_store(layer, k, v)
        }
        fn attention(
            &mut self,
            layer: usize,
            q: $crate::Buf,
            out: $crate::Buf,
            spec: &$crate::AttnSpec,
        ) {
            self.$inner.attention(layer, q, out, spec)
        }
        fn conv1d(
            &mut self,
            layer: usize,
            x: $crate::Buf,
            w: $crate::Buf,
            out: $crate::Buf,
            spec: &$crate::ConvSpec,
        ) {
            self.$inner.conv1d(layer, x, w, out, spec)
        }
        fn delta_net(&mut self, layer: usize, io: &$crate::DeltaIo, spec: &$crate::DeltaSpec) {
            self.$inner.delta_net(layer, io, spec)
        }
        fn ssm_scan(&mut self, layer: usize, io: &$crate::ScanIo, spec: &$crate::ScanSpec) {
            self.$inner.ssm_scan(layer, io, spec)
        }
        fn swiglu(&mut self, gate: $crate::Buf, up: $crate::Buf, len: usize) {
            self.$inner.swiglu(gate, up, len)
        }
        fn swiglu_limited(&mut self, gate: $crate::Buf, up: $crate::Buf, len: usize, limit: f32) {
            self.$inner.swiglu_limited(gate, up, len, limit)
        }
        fn sparse_attention(
            &mut self,
            layer: usize,
            io: &$crate::sparse::SparseIo,
            spec: &$crate::sparse::SparseSpec,
        ) {
            self.$inner.sparse_attention(layer, io, spec)
        }
        fn sparse_store(
            &mut self,
            layer: usize,
            io: &$crate::sparse::SparseIo,
            spec: &$crate::sparse::SparseSpec,
        ) {
            self.$inner.sparse_store(layer, io, spec)
        }
        fn hyper_pre(
            &mut self,
            x: $crate::Buf,
            mix: $crate::Buf,
            base: $crate::Buf,
            out: $crate::Buf,
            rows: usize,
            s: &$crate::hyper::HyperSpec,
        ) {
            self.$inner.hyper_pre(x, mix, base, out, rows, s)
        }
        fn hyper_post(
            &mut self,
            y: $crate::Buf,
            x: $crate::Buf,
            mix: $crate::Buf,
            rows: usize,
            s: &$crate::hyper::HyperSpec,
        ) {
            self.$inner.hyper_post(y, x, mix, rows, s)
        }
        fn copy_cols(&mut self, x: $crate::Buf, out: $crate::Buf, rows: usize, c: &$crate::Cols) {
            self.$inner.copy_cols(x, out, rows, c)
        }
        fn block_conv(
            &mut self,
            x: $crate::Buf,
            coef: $crate::Buf,
            base: $crate::Buf,
            rows: usize,
            spec: &$crate::BlockConv,
            out: $crate::Buf,
        ) {
            self.$inner.block_conv(x, coef, base, rows, spec, out)
        }
        fn gelu(&mut self, gate: $crate::Buf, up: $crate::Buf, len: usize) {
            self.$inner.gelu(gate, up, len)
        }
        fn add(&mut self, x: $crate::Buf, y: $crate::Buf, len: usize) {
            self.$inner.add(x, y, len)
        }
        fn scale(&mut self, x: $crate::Buf, len: usize, factor: f32) {
            self.$inner.scale(x, len, factor)
        }
        fn gather_rows(&mut self, x: $crate::Buf, rows: &[usize], width: usize, out: $crate::Buf) {
            self.$inner.gather_rows(x, rows, width, out)
        }
        fn all_finite(&mut self, x: $crate::Buf, rows: usize, width: usize) -> Vec<bool> {
            self.$inner.all_finite(x, rows, width)
        }
        fn argmax(&mut self, x: $crate::Buf, rows: usize, width: usize) -> Vec<u32> {
            self.$inner.argmax(x, rows, width)
        }
        fn softmax_rows(&mut self, x: $crate::Buf, rows: usize, width: usize) {
            self.$inner.softmax_rows(x, rows, width)
        }
        fn top_k_rows(
            &mut self,
            x: $crate::Buf,
            rows: usize,
            width: usize,
            k: usize,
        ) -> Vec<(u32, f32)> {
            self.$inner.top_k_rows(x, rows, width, k)
        }
        fn sigmoid(&mut self, x: $crate::Buf, len: usize) {
            self.$inner.sigmoid(x, len)
        }
        fn softplus(&mut self, x: $crate::Buf, len: usize) {
            self.$inner.softplus(x, len)
        }
        fn l2_norm_rows(
            &mut self,
            x: $crate::Buf,
            rows: usize,
            width: usize,
            eps: f32,
            out: $crate::Buf,
        ) {
            self.$inner.l2_norm_rows(x, rows, width, eps, out)
        }
        fn mul(&mut self, x: $crate::Buf, y: $crate::Buf, len: usize) {
            self.$inner.mul(x, y, len)
        }
        fn relu_sqr(&mut self, x: $crate::Buf, len: usize) {
            self.$inner.relu_sqr(x, len)
        }
        fn moe_stats(&self) -> $crate::MoeStats {
            self.$inner.moe_stats()
        }
        fn profile_ops(&mut self, on: bool) -> bool {
            self.$inner.profile_ops(on)
        }
        fn op_times(&mut self) -> Vec<$crate::OpTime> {
            self.$inner.op_times()
        }
        fn read_bandwidth(&mut self) -> Option<f64> {
            self.$inner.read_bandwidth()
        }
    };
}
