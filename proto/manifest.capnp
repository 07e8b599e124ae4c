# The manifest of a WASTE container (model.waste/manifest). See docs/FORMAT.md.
@0xb7c1a9e4d2f35a01;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("waste::proto");

enum TensorFormat {
  f32 @0;
  bf16 @1;
  f16 @2;
  q8g @3;   # int8 values, one f16 scale per group of `groupSize` inputs
  q4g @4;   # 4-bit values (q - 8), two per byte low nibble first, f16 scale per group
  vq3r @5;  # 3-stage residual VQ, 3 index bytes per 8 weights, f16 scale per row
}

# Trunk tensors include the K3 vision tower's and projector's (vision_tower.*, mm_projector.*),
# under their release names, which have no tensor prefix.
struct TrunkTensor {
  name @0 :Text;            # the release's tensor name without the tensor prefix
  format @1 :TensorFormat;
  shape @2 :List(UInt64);
  offset @3 :UInt64;        # byte offset of the tensor in trunk.bin (64-byte aligned)
  bytes @4 :UInt64;         # bytes from offset, scales included
  groupSize @5 :UInt32;     # q8g/q4g only
  scalesOffset @6 :UInt64;  # q8g/q4g: scales start at offset + scalesOffset
  checksum @7 :UInt64;      # xxh3-64 of the tensor's bytes
}

struct ExpertLayer {
  layer @0 :UInt32;          # 0-based decoder layer
  bankFile @1 :Text;         # "experts-L<layer>.bin"
  expertCount @2 :UInt32;
  stride @3 :UInt64;         # bytes per record, a multiple of 4096
  format @4 :TensorFormat;   # vq3r, f32 or bf16
  hidden @5 :UInt32;         # expert input width (the latent width for K3)
  intermediate @6 :UInt32;   # expert inner width
  payloadBytes @7 :UInt32;   # bytes after the 64-byte header covered by the checksum
  gateOffset @8 :UInt32;     # offsets from the record start
  upOffset @9 :UInt32;
  downOffset @10 :UInt32;
  scalesOffset @11 :UInt32;  # vq3r: gate, up, down row scales (f16) back to back; else 0
  codebookOffset @12 :UInt64;  # vq3r: offset in codebooks.bin of this layer's gate, up, down books
  relativeError @13 :List(Float32);  # vq3r: measured relative MSE of gate, up, down (empty if unknown)
  codebookChecksum @14 :UInt64;      # vq3r: xxh3-64 of the layer's books in codebooks.bin (0: written before it existed)
}

struct Manifest {
  formatVersion @0 :UInt32;
  arch @1 :Text;              # kimi_linear | kimi_k3 | deepseek_v3
  configJson @2 :Text;        # the release's config.json, verbatim
  tensorPrefix @3 :Text;      # e.g. "language_model." (K3); stripped from trunk tensor names
  createdBy @4 :Text;         # "waste convert <dir>" / "waste synth --preset ..."
  containerId @5 :UInt64;     # random at creation; iod and compute check they opened the same container
  trunkFile @6 :Text;
  trunkBytes @7 :UInt64;
  tensors @8 :List(TrunkTensor);
  layers @9 :List(ExpertLayer);
  codebooksFile @10 :Text;    # empty when no layer is vq3r
  codebooksBytes @11 :UInt64;
  tokenizerFile @12 :Text;    # tiktoken rank file, empty if none
  tokenizerConfigFile @13 :Text;
  synthetic @14 :Bool;        # random weights: text output is meaningless
  preprocessorConfigJson @15 :Text;  # the release's preprocessor_config.json, verbatim; "" = no vision
}
