# Per target and speed: TTFT mean and p90 (log scale: past its knee a fleet is ten times
# slower), and the cached share against the trace window's reuse bound (bench/trace.py).
# trace.dat: one row per target; per speed three columns: TTFT mean, TTFT p90 (simulated ms),
# cached share (%).
set terminal pngcairo size 1100,750 font "sans,10" noenhanced
set output "@PNG@"
set multiplot layout 2,1 title "@TITLE@"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set grid ytics
set key outside right top autotitle columnheader
set xtics rotate by -20
set xrange [-0.5:@NTARGETS@-0.5]
set ylabel "TTFT, simulated ms (log scale)"
set logscale y
set yrange [100:*]
plot for [i=1:@NSPEEDS@] for [j=0:1] "@DAT@" using 3*i-1+j:xtic(1)
set ylabel "cached share of prompt tokens (%)"
unset logscale y
set yrange [0:*]
plot for [i=1:@NSPEEDS@] "@DAT@" using 3*i+1:xtic(1), \
     @BOUND@ with lines lw 2 dt 2 lc rgb "black" title "reuse bound"
unset multiplot
