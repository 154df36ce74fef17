"""Where the f32 error of the GPU randomized SVD comes from (bench/RESULTS.md).

Simulates tsr-svd-gpu's algorithm (bench/svd_gpu.c: Y = X Om by column
chunks summed in fan-in-16 trees, a QR per row block, the SVD of the stacked
R's, Q_i U_i, B = sum Q_i' X_ij, the SVD of B) in numpy f64 on an N x C
randint(0, 3) matrix, and perturbs one ingredient at a time the way the GPU
did: Om in f32, Om or Q quantized per column to 22 bits (the fused int8
kernels' three digits), Y / the QRs / B rounded to f32. Prints the largest
error of s and of v (rows matched in sign) against the unperturbed run,
relative to the largest value, as tsr-svd-gpu --check does.

    bench/.venv/bin/python bench/svd_gpu_errsim.py 100000 5000 20000 1250

(N C row-chunk col-chunk; about 6 minutes on the 2-core build machine.)"""
import sys
import time

import numpy as np

N=int(sys.argv[1]); C=int(sys.argv[2]); CR=int(sys.argv[3]); CC=int(sys.argv[4]); L=20; K=10
rng=np.random.default_rng(1)
X=rng.integers(0,3,size=(N,C),dtype=np.uint8)
Om=np.random.default_rng(2).standard_normal((C,L))
nr=N//CR; nc=C//CC
Xb=[[X[i*CR:(i+1)*CR, j*CC:(j+1)*CC].astype(np.float64) for j in range(nc)] for i in range(nr)] if N*C<=6e8 else None
def blk(i,j):
    return Xb[i][j] if Xb is not None else X[i*CR:(i+1)*CR, j*CC:(j+1)*CC].astype(np.float64)
def quant(B, bits):
    if bits is None: return B
    m=np.abs(B).max(axis=0); e=np.zeros_like(m)
    nz=m>0; _,ex=np.frexp(m[nz]); e[nz]=bits-ex
    s=np.ldexp(1.0,e.astype(int))
    return np.rint(B*s)/s
def r32(A, on): return A.astype(np.float32).astype(np.float64) if on else A
def tsum(parts, f32):
    # fan-in 16 n-ary add, f32 left to right
    while len(parts)>1:
        nxt=[]
        for t in range(0,len(parts),16):
            acc=parts[t].copy()
            for p in parts[t+1:t+16]: acc=r32(acc+p,f32)
            nxt.append(acc)
        parts=nxt
    return parts[0]
def qr(A,f32):
    if f32:
        q,r=np.linalg.qr(A.astype(np.float32)); return q.astype(np.float64), r.astype(np.float64)
    return np.linalg.qr(A)
def run(bits1=None,y32=False,qr32=False,bits2=None,b32=False,om32=False):
    om=r32(Om,om32)
    om=quant(om,bits1)
    Qs=[];Rs=[]
    for i in range(nr):
        parts=[r32(blk(i,j)@om[j*CC:(j+1)*CC], y32) for j in range(nc)]
        y=tsum(parts,y32)
        q,r=qr(y,qr32); Qs.append(q); Rs.append(r)
    R=np.vstack(Rs)
    if qr32:
        U,S,W=np.linalg.svd(R.astype(np.float32),full_matrices=False); U=U.astype(np.float64)
    else: U,S,W=np.linalg.svd(R,full_matrices=False)
    Qs=[r32(Qs[i]@U[i*L:(i+1)*L],qr32) for i in range(nr)]
    Bj=[]
    for j in range(nc):
        parts=[r32(quant(Qs[i],bits2).T@blk(i,j), b32) for i in range(nr)]
        Bj.append(tsum(parts,b32))
    B=np.hstack(Bj)
    u,s,vt=np.linalg.svd(B,full_matrices=False)
    return s[:K],vt[:K]
def cmp(a,b):
    sa,va=a; sb,vb=b
    es=np.abs(sa-sb).max()/np.abs(sb).max()
    ev=0
    for i in range(K):
        sg=1 if va[i]@vb[i]>=0 else -1
        ev=max(ev,np.abs(sg*va[i]-vb[i]).max())
    return es, ev/np.abs(vb).max()
t=time.time(); ref=run(); print("ref s",ref[0], "%.1fs"%(time.time()-t)); sys.stdout.flush()
cases={
 'all f32 (today)':dict(bits1=22,y32=True,qr32=True,bits2=22,b32=True,om32=True),
 'om f32 only':dict(om32=True),
 'om q22 only':dict(bits1=22),
 'Y f32 only':dict(y32=True),
 'QR f32 only':dict(qr32=True),
 'Q q22 only':dict(bits2=22),
 'B f32 only':dict(b32=True),
 'f64, q30/q30':dict(bits1=30,bits2=30),
 'f64, q38/q38':dict(bits1=38,bits2=38),
 'f64 thin, q22/q22':dict(bits1=22,bits2=22),
}
for name,kw in cases.items():
    es,ev=cmp(run(**kw),ref); print("%-22s s %.2e  v %.2e"%(name,es,ev)); sys.stdout.flush()
