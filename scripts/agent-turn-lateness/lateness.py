"""How late each agent turn went out against its trace: `sent_at - job.due_at` over a run's
requests.jsonl, in ms (p50/p99 interpolated, the latest, and how many over the 50 ms that
`client-limited` counts). Usage: python3 lateness.py RUN_DIR"""
import json,sys,glob
f=glob.glob(sys.argv[1]+"/**/requests.jsonl",recursive=True)[0]
L=[];ctx=[]
for line in open(f):
    r=json.loads(line); j=r.get("job") or {}
    if j.get("due_at") is None or r.get("sent_at") is None: continue
    L.append((r["sent_at"]-j["due_at"])*1000); ctx.append(r.get("prompt_tokens") or 0)
L2=sorted(L)
def p(q):
    k=(len(L2)-1)*q; i=int(k); return L2[i]+(L2[min(i+1,len(L2)-1)]-L2[i])*(k-i)
print(f"turns {len(L)} p50 {p(.5):.1f} ms p99 {p(.99):.1f} ms max {L2[-1]:.1f} ms min {L2[0]:.1f} ms; late>50ms {sum(x>50 for x in L)}")
big=[l for l,c in zip(L,ctx) if c>70000]
if big: print("turns over 70k tokens:", len(big), "max", round(max(big),1))
