"""State size (bytes of JSON) against world size × workers, dataset size and cursor."""

from __future__ import annotations

import json

import datareel


class Sized:
    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        return i


def main() -> None:
    print("| W | N | W·N | dataset size | cursor | state bytes |")
    print("|---|---|---|---|---|---|")
    for W, N, n, cursor in (
        (1, 0, 10**3, 0),
        (8, 4, 10**6, 8 * 10**6),
        (64, 8, 10**9, 64 * 10**9),
        (512, 16, 10**12, 512 * 10**12),
        (4096, 16, 10**15, 4096 * 10**14),
    ):
        loader = datareel.Loader(
            datareel.from_sequence(Sized(n), name="corpus"),
            global_batch_size=W * 4,
            micro_batch_size=4,
            rank=W - 1,
            world_size=W,
            num_workers=N,
        )
        loader.load_state_dict({**loader.state_dict(), "cursor": cursor})
        print(f"| {W} | {N} | {W * N} | {n:.0e} | {cursor:.0e} | {len(json.dumps(loader.state_dict()))} |")


if __name__ == "__main__":
    main()
