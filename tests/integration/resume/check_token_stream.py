# resume_changes.sh: TRACE: the token stream continues across a seq_len change (each token read
#   once)
import sys
rows = [l.split() for l in open(sys.argv[1])]
seqs = [(int(r[1]), int(r[3]), int(r[5]), int(r[7]), int(r[9])) for r in rows]
steps = sorted({s[0] for s in seqs})
assert steps == list(range(1, 21)), "steps traced: %s" % steps
assert {s[4] for s in seqs if s[0] <= 10} == {64} and {s[4] for s in seqs if s[0] > 10} == {32}
# in step order the input ranges tile the stream: each starts where the previous one ended
pos = None
for step, epoch, shard, tok, T in seqs:
    if pos is not None and (epoch, shard, tok) != pos:
        sys.exit("step %d reads from token %d (shard %d), the stream continues at %s"
                 % (step, tok, shard, pos))
    pos = (epoch, shard, tok + T)
print("trace: %d sequences, steps 1-10 at T=64 then 11-20 at T=32, tokens [0, %d) each "
      "read once" % (len(seqs), pos[2]))
