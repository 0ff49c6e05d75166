//! Models: hyper-parameters from GGUF, memory-mapped weights, and the forward pass written
//! once against the [`device::Device`] ops, over a batch of rows from several sequences and
//! over any contiguous range of layers.
//!
//! An architecture is a recipe ([`arch`]): it reads its hyper-parameters, loads each
//! block's tensors through a [`TensorLoader`] (each named once) and runs each block as a
//! [`Layer`]. Stages: [`Model::embed`] (tokens → hidden), [`Model::forward_layers`]
//! (hidden → hidden over `layers`), [`Model::output`] (hidden → logits), each on the
//! weights [`Model::upload`] put on a device. Every op is batch-invariant, so a row's
//! logits do not depend on the batch it was computed in.
//!
//! Modules, each using only those listed before it: `error`, `quant` (quantizing a
//! model file: importance matrices, each tensor's type, re-encoding), `tensors`,
//! `hparams`, `stage`, `scratch`, `layers`, `arch`, then the model here and `head`,
//! `synthetic`; `vision` (towers of images) uses `tensors` alone.

pub mod arch;
mod error;
mod head;
mod hparams;
pub mod layers;
pub mod lora;
pub mod quant;
pub mod rope;
mod scratch;
mod stage;
pub mod synthetic;
mod tensors;
pub mod vision;

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use device::{Buf, Device, Op, Progress, Role};
use gguf::{GgmlType, GgufFile, LoadMode, Metadata};

pub use arch::{Arch, Recipe, RECIPES};
pub use device::{Gating, MoeStats, Row};
pub use error::{Error, Result};
pub use head::SubsetHead;
pub use hparams::{
    ExpertWidth, Experts, HParams, MoeParams, RoutingDefaults, SharedExpert, Sliding,
    SlidingPattern, TargetFeatures, Traits,
};
pub use layers::{Cx, Layer, LayerMemory};
pub use scratch::Scratch;
pub use stage::{Part, Stage};
pub use tensors::{
    DeviceTensors, LazyMode, MatId, MatSpan, Matrix, Reads, TensorLoader, TensorTable, VecId,
    Vector, Weight,
};

/// A loaded model: its recipe, hyper-parameters and the tensors of its stage, checked, in
/// the map. A device holds them once [`Model::upload`] has run.
pub struct Model {
    pub file: Arc<GgufFile>,
    pub arch: Arch,
    pub hparams: HParams,
    /// The part of the model this holds (the whole model unless loaded with
    /// [`Model::load_stage`]).
    pub stage: Stage,
    /// Every tensor of the stage, as the recipe loaded them.
    pub tensors: TensorTable,
    /// `[n_vocab, n_embd]`, when the stage embeds.
    token_embd: Option<MatId>,
    /// The blocks of the stage, `layers[i]` being block `stage.layers.start + i`.
    layers: Vec<Box<dyn Layer>>,
    /// `[n_embd]` and `[n_vocab, n_embd]` (the embedding matrix when the model ties them),
    /// when the stage ends with the head.
    output_norm: Option<VecId>,
    output: Option<MatId>,
    /// The output head restricted to part of the vocabulary ([`Model::restrict_head`]).
    pub head: Option<SubsetHead>,
    /// What merges the residual streams into one before the output norm
    /// ([`Recipe::merge`]), when the stage ends with the head.
    merge: Option<Box<dyn Layer>>,
    /// How a drafter's rows enter as the target's features ([`Part::Drafter`]).
    fuse: Option<layers::fuse::Fuse>,
    /// What a block drafter computes over its block's logits ([`Recipe::draft_head`]).
    draft_head: Option<layers::DraftHead>,
    /// The file of the model a drafter drafts for, which holds its borrowed matrices
    /// ([`Model::load_drafter`]).
    other: Option<Arc<GgufFile>>,
    /// LoRA adapters ([`Model::add_adapter`]): an executor of this model computes their
    /// terms at the scales each sequence gives ([`lora::LoraDevice`]).
    pub adapters: Vec<Arc<lora::Adapter>>,
}

/// A stage's weights on a device: what [`Model::upload`] gives.
pub struct DeviceWeights {
    t: DeviceTensors,
}

/// The hyper-parameters of the model `md` describes, as its recipe reads them.
pub fn read_hparams(md: &Metadata) -> Result<HParams> {
    Arch::from_name(md.str("general.architecture")?)?
        .recipe()
        .hparams(md)
}

impl Model {
    /// Maps the file and checks every tensor the architecture needs by name, shape and type.
    pub fn load(path: impl AsRef<Path>) -> Result<Model> {
        Self::load_stage(path, Part::Whole)
    }

    /// [`Model::load`] for a part of the model: only the tensors of its stage are checked
    /// and counted; the others are never read. A split that leaves one side no blocks is an
    /// error before anything is loaded.
    pub fn load_stage(path: impl AsRef<Path>, part: Part) -> Result<Model> {
        Self::load_stage_with(path, part, LoadMode::Mmap)
    }

    /// [`Model::load_stage`] with the file held as `mode` says (`--load-mode`).
    pub fn load_stage_with(path: impl AsRef<Path>, part: Part, mode: LoadMode) -> Result<Model> {
        Self::load_from(GgufFile::open_with(path, mode)?, part, None)
    }

    /// The drafter stage ([`Part::Drafter`]) of the drafter at `path` for `target`: the
    /// matrices its file lacks (its embeddings, its output head) are `target`'s, as
    /// llama.cpp takes them.
    pub fn load_drafter(path: impl AsRef<Path>, mode: LoadMode, target: &Model) -> Result<Model> {
        let file = GgufFile::open_with(path, mode)?;
        Self::load_from(file, Part::Drafter, Some(target.file.clone()))
    }

    /// The NextN stage ([`Part::Nextn`]) of an MTP sidecar at `path` for `target` (a file of
    /// the target's architecture holding its multi-token-prediction blocks, as llama.cpp's
    /// `mtp-*.gguf`): the matrices it lacks (the embeddings, the head, the streams' merge) are
    /// `target`'s.
    pub fn load_nextn_sidecar(
        path: impl AsRef<Path>,
        mode: LoadMode,
        target: &Model,
    ) -> Result<Model> {
        let file = GgufFile::open_with(path, mode)?;
        let arch = file.header.metadata.str("general.architecture")?;
        if arch != target.arch.name() {
            return Err(Error::BadStage(format!(
                "an MTP file of {arch} for a {} model",
                target.arch.name()
            )));
        }
        Self::load_from(file, Part::Nextn, Some(target.file.clone()))
    }

    fn load_from(file: GgufFile, part: Part, other: Option<Arc<GgufFile>>) -> Result<Model> {
        let md = &file.header.metadata;
        let arch = Arch::from_name(md.str("general.architecture")?)?;
        let recipe = arch.recipe();
        let hparams = recipe.hparams(md)?;
        let mut stage = part.stage(hparams.n_layer, hparams.n_nextn)?;
        if part == Part::Drafter {
            stage.embed = recipe.drafter_embeds();
        }
        if hparams.target.is_some() && part != Part::Drafter {
            return Err(Error::BadStage(format!(
                "{} drafts from a target's features: it runs beside its target (-md), not alone",
                arch.name()
            )));
        }
        let mut t = match &other {
            Some(other) => TensorLoader::with_fallback(&file, other),
            None => TensorLoader::new(&file),
        };
        for name in ["rope_factors_long.weight", "rope_factors_short.weight"] {
            if t.has(name) {
                return Err(Error::UnsupportedTensor {
                    tensor: name.to_string(),
                    what: "LongRoPE's frequency factors",
                });
            }
        }
        let (e, nv) = (hparams.n_embd, hparams.n_vocab);
        let nextn = part == Part::Nextn;
        // A NextN block may have a head of its own.
        let shared = |s: &str| format!("blk.{}.nextn.shared_head_{s}.weight", stage.layers.start);
        let own = |t: &TensorLoader, s: &str, name: &str| match nextn && t.has(&shared(s)) {
            true => shared(s),
            false => name.to_string(),
        };
        let embd = |t: &mut TensorLoader, role| t.matrix_for("token_embd.weight", nv, e, role);
        let token_embd = stage.embed.then(|| embd(&mut t, Role::Rows)).transpose()?;
        let head = own(&t, "head", "output.weight");
        // A drafter's own head, else its own embeddings (tied), else its target's head (as
        // llama.cpp picks them).
        let has_head = t.has_own(&head) || !t.has_own("token_embd.weight") && t.has(&head);
        // A drafter's own head over a reduced vocabulary: its rows are the tokens of `d2t`.
        let d2t = match part == Part::Drafter && t.has_own("d2t") {
            true => Some(t.ids("d2t", nv)?),
            false => None,
        };
        let head_rows = d2t.as_ref().map_or(nv, Vec::len);
        let output = match (stage.head, has_head) {
            (false, _) => None,
            (true, true) => Some(t.matrix(&head, head_rows, e)?),
            (true, false) => Some(embd(&mut t, Role::Multiply)?),
        };
        let layers = stage
            .layers
            .clone()
            .map(|il| match nextn {
                true => recipe.nextn(&mut t, &hparams, il),
                false => recipe.layer(&mut t, &hparams, il),
            })
            .collect::<Result<Vec<_>>>()?;
        let norm = own(&t, "norm", "output_norm.weight");
        let output_norm = stage.head.then(|| t.vector(&norm, e)).transpose()?;
        if let Some(il) = matches!(part, Part::Last(_))
            .then(|| {
                stage
                    .layers
                    .clone()
                    .zip(&layers)
                    .find(|(_, l)| l.needs_tokens())
            })
            .flatten()
            .map(|(il, _)| il)
        {
            return Err(Error::BadStage(format!(
                "block {il} routes by token: a split must keep it with the embeddings"
            )));
        }
        let merge = match stage.head {
            true => recipe.merge(&mut t, &hparams)?,
            false => None,
        };
        let fuse = match part {
            Part::Drafter => Some(recipe.fuse(&mut t, &hparams)?),
            _ => None,
        };
        let draft_head = match part {
            Part::Drafter => recipe.draft_head(&mut t, &hparams, head_rows)?,
            _ => None,
        };
        let tensors = t.finish();
        let mut model = Model {
            file: Arc::new(file),
            arch,
            hparams,
            stage,
            tensors,
            token_embd,
            layers,
            output_norm,
            output,
            head: None,
            merge,
            fuse,
            draft_head,
            other,
            adapters: Vec::new(),
        };
        if let Some(ids) = d2t {
            model.map_head(ids)?;
        }
        Ok(model)
    }

    /// Loads the LoRA adapter at `path` for this model (before [`Model::upload`]), applied
    /// at `scale` to sequences that give no scales of their own; its index is the number
    /// of adapters added before it.
    pub fn add_adapter(&mut self, path: &Path, scale: f32) -> Result<()> {
        let adapter = lora::Adapter::load(path, scale, self)?;
        self.adapters.push(Arc::new(adapter));
        Ok(())
    }

    /// Leaves the tables `mode` says in the file, read as their rows are needed
    /// ([`LazyMode`]); before [`Model::upload`].
    pub fn set_lazy(&mut self, mode: LazyMode) {
        self.tensors.set_lazy(mode);
    }

    /// Bytes of the tables read from the file as needed on a device whose matrices take
    /// `matrix_bytes` (those it holds no memory for).
    pub fn lazy_bytes(&self, matrix_bytes: &dyn Fn(GgmlType, usize, usize, Role) -> u64) -> u64 {
        self.tensors
            .iter()
            .filter(|(_, m)| m.role == Role::LazyRows)
            .filter(|(_, m)| {
                matrix_bytes(m.weight.ty, m.weight.n_rows, m.weight.n_cols, m.role) == 0
            })
            .map(|(_, m)| m.weight.range.len() as u64)
            .sum()
    }

    /// What each block of the stage keeps of a sequence, in order.
    pub fn memory(&self) -> Vec<LayerMemory> {
        let first = self.stage.layers.start;
        let layers = self.layers.iter().enumerate();
        layers
            .map(|(i, l)| l.memory(&self.hparams, first + i))
            .collect()
    }

    /// Floats per row of the buffers the stage's blocks ask for besides the named ones
    /// ([`Layer::scratch`]): the widest of each.
    pub fn scratch_widths(&self) -> Vec<usize> {
        let mut widths: Vec<usize> = Vec::new();
        for l in self.layers.iter().chain(&self.merge) {
            let w = l.scratch();
            widths.resize(widths.len().max(w.len()), 0);
            widths.iter_mut().zip(w).for_each(|(a, b)| *a = (*a).max(b));
        }
        widths
    }

    /// The embedding table, when the stage embeds.
    pub fn token_embd(&self) -> Option<&Weight> {
        self.token_embd.map(|id| &self.tensors.matrix(id).weight)
    }

    /// The full output head, when the stage ends with it.
    pub fn output_matrix(&self) -> Option<&Weight> {
        self.output.map(|id| &self.tensors.matrix(id).weight)
    }

    /// `(ty, n_rows, n_cols, role)` of matrix `id` as a device holds it: the restricted
    /// head's in place of the full one.
    fn held_shape(&self, id: MatId) -> (GgmlType, usize, usize, Role) {
        match &self.head {
            Some(h) if Some(id) == self.output => {
                let (ty, r, c) = h.shape();
                (ty, r, c, Role::Multiply)
            }
            _ => {
                let m = self.tensors.matrix(id);
                (m.weight.ty, m.weight.n_rows, m.weight.n_cols, m.role)
            }
        }
    }

    /// Bytes of weights the stage holds on a device whose matrices take `matrix_bytes(ty,
    /// n_rows, n_cols, role)`: its matrices (a tied output head is a second matrix beside
    /// the embedding table, a restricted head in place of the full one) and the vectors
    /// copied at load.
    pub fn weight_bytes(&self, matrix_bytes: &dyn Fn(GgmlType, usize, usize, Role) -> u64) -> u64 {
        let matrices: u64 = self
            .tensors
            .iter()
            .map(|(id, _)| {
                let (ty, r, c, role) = self.held_shape(id);
                matrix_bytes(ty, r, c, role)
            })
            .sum();
        matrices + 4 * self.tensors.vector_len() as u64
    }

    /// Bytes of weights one decode step of one row streams on a device whose matrices
    /// take `matrix_bytes`: [`TensorTable::decode_bytes`], with the restricted head in
    /// place of the full one.
    pub fn decode_bytes(&self, matrix_bytes: &dyn Fn(GgmlType, usize, usize, Role) -> u64) -> u64 {
        self.tensors.decode_bytes(&|id| {
            let (ty, r, c, role) = self.held_shape(id);
            matrix_bytes(ty, r, c, role)
        })
    }

    /// The ops a forward of this stage needs.
    pub fn ops(&self) -> Vec<Op> {
        let mut ops = vec![
            Op::RmsNorm,
            Op::MatMul,
            Op::Rope,
            Op::KvStore,
            Op::Attention,
            Op::Add,
            Op::Swiglu,
            Op::AllFinite,
        ];
        if self.stage.embed {
            ops.push(Op::Embed);
        }
        if self.stage.layers.start >= self.hparams.n_layer {
            ops.extend([Op::Embed, Op::CopyCols]);
        }
        if self.stage.head {
            ops.extend([Op::GatherRows, Op::Argmax]);
        }
        if self.hparams.moe.is_some() {
            ops.push(Op::Moe);
        }
        ops.extend(self.arch.recipe().extra_ops());
        if self.stage.embed && self.hparams.embed_scale.is_some() {
            ops.push(Op::Scale);
        }
        ops
    }

    /// Uploads the stage's weights to `dev`, refusing (before anything is uploaded) an op
    /// or weight type it does not run, named.
    pub fn upload(&self, dev: &mut dyn Device, progress: &Progress<'_>) -> Result<DeviceWeights> {
        if let Some(op) = self.ops().into_iter().find(|&op| !dev.supports(op)) {
            return Err(Error::Device(device::Error::Unsupported {
                device: dev.describe(),
                what: format!("run the {op:?} op"),
            }));
        }
        let sources: Vec<_> = self
            .tensors
            .iter()
            .map(|(id, m)| match &self.head {
                Some(h) if Some(id) == self.output => h.source(),
                _ => m.weight.source(self.file_of(&m.weight), m.role),
            })
            .collect();
        if let Some(bad) = sources.iter().find(|s| !dev.supports_type(s.ty)) {
            return Err(Error::Device(device::Error::Unsupported {
                device: dev.describe(),
                what: format!("compute with tensor '{}' of type {}", bad.name, bad.ty),
            }));
        }
        let t = DeviceTensors::upload(dev, &self.tensors, &sources, progress)?;
        Ok(DeviceWeights { t })
    }

    /// Embedding rows for `tokens` into `hidden` (`[tokens.len(), hidden_width]`), scaled
    /// where the architecture scales them, each repeated in every residual stream
    /// ([`HParams::streams`]; through `s.x`).
    pub fn embed(
        &self,
        dev: &mut dyn Device,
        w: &DeviceWeights,
        s: &Scratch,
        tokens: &[u32],
        hidden: Buf,
    ) -> Result<()> {
        let table = self.token_embd.ok_or(Error::NotInStage("the embeddings"))?;
        let hp = &self.hparams;
        self.check_tokens(tokens)?;
        let into = if hp.streams > 1 { s.x } else { hidden };
        dev.embed(w.t[table], tokens, into);
        if let Some(f) = hp.embed_scale {
            dev.scale(into, tokens.len() * hp.n_embd, f);
        }
        if hp.streams > 1 {
            let rows: Vec<usize> = (0..tokens.len() * hp.streams)
                .map(|i| i / hp.streams)
                .collect();
            dev.gather_rows(s.x, &rows, hp.n_embd, hidden);
        }
        Ok(())
    }

    /// The file holding `w`: the model's, or its target's for a drafter's borrowed matrix.
    pub(crate) fn file_of(&self, w: &Weight) -> &Arc<GgufFile> {
        match (&self.other, w.borrowed) {
            (Some(other), true) => other,
            _ => &self.file,
        }
    }

    /// Floats of a row's features, for a drafter of a target's features
    /// ([`Part::Drafter`]).
    pub fn fuse_width(&self) -> Option<usize> {
        self.fuse.as_ref().map(|f| f.width())
    }

    /// `hidden` (`[n, n_embd]`) from the target's `features` (`[n, fuse_width]`, which it
    /// may overwrite), for a drafter of a target's features.
    pub fn fuse(
        &self,
        dev: &mut dyn Device,
        w: &DeviceWeights,
        features: Buf,
        hidden: Buf,
        n: usize,
    ) -> Result<()> {
        let fuse = self
            .fuse
            .as_ref()
            .ok_or(Error::NotInStage("a fusion of features"))?;
        fuse.forward(&self.hparams, &w.t, dev, features, hidden, n);
        Ok(())
    }

    /// What a block drafter computes over its block's logits, when it has something.
    pub fn draft_head(&self) -> Option<&layers::DraftHead> {
        self.draft_head.as_ref()
    }

    /// A block drafter's Markov head (DSpark's), when it has one.
    pub fn markov(&self) -> Option<&layers::markov::MarkovHead> {
        match &self.draft_head {
            Some(layers::DraftHead::Markov(m)) => Some(m),
            _ => None,
        }
    }

    /// [`layers::markov::MarkovHead::bias`] after each token of `prev`: `rows`
    /// `[prev.len(), rank]`, `bias` `[prev.len(), n_logits]`.
    pub fn markov_bias(
        &self,
        dev: &mut dyn Device,
        w: &DeviceWeights,
        prev: &[u32],
        rows: Buf,
        bias: Buf,
    ) -> Result<()> {
        let head = self.markov().ok_or(Error::NotInStage("a Markov head"))?;
        head.bias(&w.t, dev, prev, rows, bias, self.n_logits());
        Ok(())
    }

    /// Whether rows entering as fused features only give the blocks' memory its context
    /// ([`Model::inject`]) rather than being computed through the blocks.
    pub fn injects_features(&self) -> bool {
        self.fuse.is_some() && self.arch.recipe().injects_features()
    }

    /// Every block of the stage writes into its memory what it keeps of `n` rows whose
    /// fused features are `g` ([`Layer::inject`]), for a block drafter's context.
    pub fn inject(&self, dev: &mut dyn Device, w: &DeviceWeights, s: &Scratch, g: Buf, n: usize) {
        for il in self.stage.layers.clone() {
            let kv_layer = il - self.stage.layers.start;
            let cx = Cx {
                hp: &self.hparams,
                t: &w.t,
                s,
                il,
                kv_layer,
                tokens: None,
            };
            self.layers[kv_layer].inject(&cx, dev, g, n);
        }
    }

    /// An error naming the first of `tokens` outside the vocabulary.
    pub fn check_tokens(&self, tokens: &[u32]) -> Result<()> {
        let n_vocab = self.hparams.n_vocab;
        match tokens.iter().find(|&&t| t as usize >= n_vocab) {
            Some(&id) => Err(Error::TokenOutOfRange { id, n_vocab }),
            None => Ok(()),
        }
    }

    /// Runs blocks `layers` (of the stage's) over `hidden` (`[n, hidden_width]`, updated in
    /// place) for the rows of the step begun on `dev`, writing each row's keys and values
    /// into the device's KV pool (which holds the stage's blocks, the first at index 0).
    /// `tokens`: the rows' tokens, where the stage embedded them (blocks that route by
    /// token need them: [`Cx::tokens`]).
    #[allow(clippy::too_many_arguments)]
    pub fn forward_layers(
        &self,
        dev: &mut dyn Device,
        w: &DeviceWeights,
        s: &Scratch,
        layers: Range<usize>,
        hidden: Buf,
        n: usize,
        tokens: Option<&[u32]>,
    ) {
        assert!(
            n <= s.max_rows,
            "{n} rows exceed the scratch of {}",
            s.max_rows
        );
        for il in layers {
            let kv_layer = il - self.stage.layers.start;
            let cx = Cx {
                hp: &self.hparams,
                t: &w.t,
                s,
                il,
                kv_layer,
                tokens,
            };
            self.layers[kv_layer].forward(&cx, dev, hidden, n);
        }
    }

    /// Final norm and output head: `logits` (`[n, n_logits]`) for `x` (`[n, hidden_width]`,
    /// normalized in place).
    pub fn output(
        &self,
        dev: &mut dyn Device,
        w: &DeviceWeights,
        s: &Scratch,
        x: Buf,
        n: usize,
        logits: Buf,
    ) {
        let head = self.output.expect("the stage holds the output head");
        self.output_norm(dev, w, s, x, n);
        dev.matmul(&[w.t[head]], x, n, &[device::MatOut::to(logits)]);
    }

    /// The output norm of `x` (`[n, hidden_width]`, in place; `[n, n_embd]` after it, the
    /// residual streams merged first where there are several): the final hidden states that
    /// embeddings pool.
    pub fn output_norm(
        &self,
        dev: &mut dyn Device,
        w: &DeviceWeights,
        s: &Scratch,
        x: Buf,
        n: usize,
    ) {
        self.merge_streams(dev, w, s, x, n);
        let hp = &self.hparams;
        let norm = self.output_norm.expect("the stage holds the output head");
        dev.rms_norm(x, w.t[norm], n, hp.n_embd, hp.rms_eps, x);
    }

    /// The states rows give besides logits: [`Model::output_norm`]'s, or the streams
    /// merged alone where the stage's draft head reads them before the norm
    /// ([`layers::DraftHead::reads_before_norm`]). `x`: `[n, hidden_width]`, in place.
    pub fn state_out(
        &self,
        dev: &mut dyn Device,
        w: &DeviceWeights,
        s: &Scratch,
        x: Buf,
        n: usize,
    ) {
        match self
            .draft_head()
            .is_some_and(layers::DraftHead::reads_before_norm)
        {
            true => self.merge_streams(dev, w, s, x, n),
            false => self.output_norm(dev, w, s, x, n),
        }
    }

    /// `x` (`[n, hidden_width]`) becomes `[n, n_embd]` in place where the residual has
    /// several streams; nothing otherwise.
    fn merge_streams(
        &self,
        dev: &mut dyn Device,
        w: &DeviceWeights,
        s: &Scratch,
        x: Buf,
        n: usize,
    ) {
        let hp = &self.hparams;
        if let Some(merge) = &self.merge {
            let cx = Cx {
                hp,
                t: &w.t,
                s,
                il: hp.n_layer,
                kv_layer: usize::MAX,
                tokens: None,
            };
            merge.forward(&cx, dev, x, n);
        }
    }
}
