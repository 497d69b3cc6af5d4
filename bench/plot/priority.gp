# interactive TTFT over time beside a bulk run, per scenario (bench/priority.py)
set terminal pngcairo size 1000,560 font "sans,11"
set output "@PNG@"
set title "@TITLE@"
set xlabel "seconds since the scenario started"
set ylabel "TTFT (ms)"
set logscale y
set grid
set key outside right top
plot @PLOTS@
