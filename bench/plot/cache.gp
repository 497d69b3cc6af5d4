# Per workload and target: prompt cache hit rate, and TTFT p50 / p99 (bench/cache.py)
set terminal pngcairo size 1100,700 font "sans,10"
set output "@PNG@"
set multiplot layout 2,1 title "@TITLE@"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set grid ytics
set key outside right top
set xtics rotate by -20
set ylabel "cache hit rate (%)"
set yrange [0:100]
plot "@DAT@" using 2:xtic(1) title "multi-turn (all prompt tokens)", \
     "" using 3 title "multi-turn (history only)", \
     "" using 4 title "bulk"
set ylabel "TTFT, simulated ms"
set yrange [0:*]
plot "@DAT@" using 5:xtic(1) title "multi-turn p50", "" using 6 title "multi-turn p99", \
     "" using 7 title "bulk p50", "" using 8 title "bulk p99", "" using 9 title "distinct p50", \
     "" using 10 title "distinct p99"
unset multiplot
