# Drawn by `kvtier report`; redraw from this folder with: gnuplot bandwidth_vs_chunk.gp
set terminal svg size 900,520 dynamic background rgb 'white' font 'sans,12'
set output 'bandwidth_vs_chunk.svg'
set termoption noenhanced
set title 'Best cold read bandwidth against chunk size'
set xlabel 'chunk size (MiB)'
set ylabel 'GB/s (1e9 bytes/s)'
set grid
set key below
set yrange [0:*]
set logscale x 2
$d0 << EOD
32 2.54429
32 2.25056
32 2.24758
EOD
$d1 << EOD
32 2.38904
32 2.2596
32 2.14239
EOD
$d2 << EOD
32 0.528655
32 0.446555
32 0.443348
EOD
$d3 << EOD
32 2.39362
32 2.47918
32 2.24783
EOD
$d4 << EOD
32 2.38904
32 2.55836
32 2.26436
EOD
$d5 << EOD
32 0.489929
32 0.476329
32 0.438043
EOD
plot $d0 using 1:2 with linespoints lw 2 pt 7 lc 1 dt 1 title 'kvtier best: file:///work/bench-tmp', \
     $d1 using 1:2 with linespoints lw 2 pt 7 lc 1 dt 2 title 'fio best: file:///work/bench-tmp', \
     $d2 using 1:2 with linespoints lw 2 pt 7 lc 2 dt 2 title 'serial pread: file:///work/bench-tmp', \
     $d3 using 1:2 with linespoints lw 2 pt 7 lc 3 dt 1 title 'kvtier best: fs:///work/bench-tmp', \
     $d4 using 1:2 with linespoints lw 2 pt 7 lc 3 dt 2 title 'fio best: fs:///work/bench-tmp', \
     $d5 using 1:2 with linespoints lw 2 pt 7 lc 4 dt 2 title 'serial pread: fs:///work/bench-tmp'
