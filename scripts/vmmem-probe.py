#!/usr/bin/env python3
# vmmem-probe.py DIR SIZE stream|shared: raw-QEMU save+restore of a file-backed
# RAM (DIR/ram, filled by the caller) through the migration stream or with
# x-ignore-shared + a reflink of the RAM file. See docs/PERFORMANCE.md (issue 20 item 4).
import json,socket,subprocess,sys,time,os
D=sys.argv[1]; size=sys.argv[2]; mode=sys.argv[3]  # mode: stream|shared
def qmp(path):
    for _ in range(100):
        try:
            s=socket.socket(socket.AF_UNIX); s.connect(path); break
        except OSError: time.sleep(0.05)
    f=s.makefile('rw'); f.readline()
    def cmd(c,a=None):
        m={"execute":c}
        if a: m["arguments"]=a
        f.write(json.dumps(m)+"\n"); f.flush()
        while True:
            r=json.loads(f.readline())
            if "return" in r or "error" in r: return r
    cmd("qmp_capabilities"); return cmd
def start(name,mem,extra):
    q=f"{D}/{name}.qmp"
    if os.path.exists(q): os.unlink(q)
    a=["qemu-system-x86_64","-M","q35,memory-backend=mem","-accel","tcg","-m",size,"-display","none","-nodefaults",
       "-object",f"memory-backend-file,id=mem,size={size},mem-path={mem},share=on","-S","-qmp",f"unix:{q},server=on,wait=off"]+extra
    p=subprocess.Popen(a); return p,qmp(q)
ram=f"{D}/ram"
p,c=start("src",ram,[])
if mode=="shared": print(c("migrate-set-capabilities",{"capabilities":[{"capability":"x-ignore-shared","state":True}]}))
t=time.time()
c("migrate",{"uri":f"exec:cat > {D}/state"})
while c("query-migrate")["return"].get("status")!="completed": time.sleep(0.01)
if mode=="shared": subprocess.check_call(["cp","--reflink=always",ram,f"{D}/ram.snap"])
save=time.time()-t
x1=c("human-monitor-command",{"command-line":"xp /4x 0x2000000"})["return"]
p.kill(); p.wait()
t=time.time()
if mode=="shared":
    subprocess.check_call(["cp","--reflink=always",f"{D}/ram.snap",f"{D}/ram.new"]); mem=f"{D}/ram.new"
else:
    mem=f"{D}/ram.fresh"
p,c=start("dst",mem,["-incoming","defer"])
if mode=="shared": c("migrate-set-capabilities",{"capabilities":[{"capability":"x-ignore-shared","state":True}]})
c("migrate-incoming",{"uri":f"exec:cat {D}/state"})
while c("query-status")["return"]["status"]=="inmigrate": time.sleep(0.01)
rest=time.time()-t
x2=c("human-monitor-command",{"command-line":"xp /4x 0x2000000"})["return"]
p.kill(); p.wait()
print(f"{mode} {size} save={save:.3f}s restore={rest:.3f}s state={os.path.getsize(D+'/state')} same={x1==x2} {x2.strip()}")
