"""docs/models.md's numpy-only safetensors writer (Debian's python3-torch has no safetensors)."""
import json
import struct


def save_safetensors(state_dict, path, metadata):
    header, blobs, offset = {"__metadata__": metadata}, [], 0
    for name, t in state_dict.items():
        data = t.detach().cpu().contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
