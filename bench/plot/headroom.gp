# the learned headroom and interactive TTFT under a stepped load (bench/headroom.py)
set terminal pngcairo size 1000,620 font "sans,11"
set output "@PNG@"
set multiplot layout 2,1 title "learned headroom beside a bulk run, interactive 1 -> 5 -> 20 -> 5 /s, then stopped"
set grid
set ylabel "slots kept / arrivals per s"
set key outside right top
plot "@DAT@" index 0 using 1:2 with steps lw 2 title "headroom (slots)", \
     "@DAT@" index 0 using 1:3 with lines title "interactive arrivals/s (learned)"
set xlabel "seconds since the run started"
set ylabel "TTFT (ms)"
set logscale y
plot "@DAT@" index 1 using 1:2 with points pt 7 ps 0.5 title "interactive TTFT"
unset multiplot
